#!/bin/sh
# Names the events fd it was given in an event, through that fd.
printf '{"v":1,"ev":"run_start","device":"fd%s"}\n' "$DEVGATE_EVENTS_FD" >&"${DEVGATE_EVENTS_FD:?}"
