#!/bin/sh
# Leaves a sleeping grandchild (holding the events fd) behind and exits.
sleep 1000 &
echo $! > grandchild.pid
exit 0
