#!/bin/sh
# Garbage, an overlong line and one good event on the events fd.
fd=${DEVGATE_EVENTS_FD:?}
{
  echo 'not json at all'
  echo '{"v":2,"ev":"step"}'
  echo '[1,2,3]'
  echo '{"v":1,"ev":5}'
  echo '{"v":1,"ev":"step","epoch":0,"step":0,"step_ms":1.5} trailing'
  head -c 100000 /dev/zero | tr '\0' 'x'; echo
  echo '{"v":1,"ev":"step","epoch":0,"step":1,"step_ms":1.5,"loss":null,"synced":false}'
  printf '{"v":1,"ev":"run_end","status":"ok"}'
} >&"$fd"
exit 0
