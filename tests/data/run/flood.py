"""Floods the events fd: 200000 step events as fast as possible, then an
epoch_end and run_end (those are not rate limited)."""
import os

fd = int(os.environ["DEVGATE_EVENTS_FD"])
line = b'{"v":1,"ev":"step","epoch":0,"step":1,"step_ms":1.0}\n'
chunk = line * 10000
for _ in range(20):
    os.write(fd, chunk)
os.write(fd, b'{"v":1,"ev":"epoch_end","epoch":0,"allocated":1}\n{"v":1,"ev":"run_end","status":"ok"}\n')
