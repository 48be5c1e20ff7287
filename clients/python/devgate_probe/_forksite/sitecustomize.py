"""Stands in for the user's sitecustomize while devgate's fork server starts
(forkserver.py): the server removes this folder from the path, and each forked
child runs the user's own sitecustomize and usercustomize at its start, as a
fresh interpreter would, never the server."""
DEVGATE_FORKSRV_SHIM = True
