"""A program stepping every 2 ms: 400 step events, one write(2) each, then an
epoch_end and run_end. Prints the events pipe's capacity to stderr."""
import fcntl
import os
import sys
import time

F_GETPIPE_SZ = 1032  # Linux
fd = int(os.environ["DEVGATE_EVENTS_FD"])
try:
    sys.stderr.write("pipe_size %d\n" % fcntl.fcntl(fd, F_GETPIPE_SZ))
except OSError:
    sys.stderr.write("pipe_size unknown\n")
for i in range(400):
    os.write(fd, b'{"v":1,"ev":"step","epoch":0,"step":%d,"step_ms":2.0}\n' % i)
    time.sleep(0.002)
os.write(fd, b'{"v":1,"ev":"epoch_end","epoch":0,"allocated":1}\n{"v":1,"ev":"run_end","status":"ok"}\n')
