#!/bin/sh
# Reports its start, then sleeps (interrupt tests send devgate SIGINT).
printf '{"v":1,"ev":"run_start","device":"cpu"}\n' >&"${DEVGATE_EVENTS_FD:?}"
sleep 30
