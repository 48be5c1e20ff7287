#!/bin/sh
# Hangs past any short --timeout, with a grandchild that left the process group.
setsid sleep 1000 &
echo $! > grandchild.pid
printf '{"v":1,"ev":"run_start","device":"cpu"}\n' >&"${DEVGATE_EVENTS_FD:?}"
sleep 1000
