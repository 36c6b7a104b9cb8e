# SPDX-License-Identifier: Apache-2.0
"""lock_churn.py DIR N SECONDS — holds N flock(2) locks on files in DIR and,
for SECONDS, keeps dropping and retaking them: the lock list that
/proc/locks shows (a page per read, each found again by its place) keeps
shifting under a reader, as on a busy container host."""
import fcntl
import os
import random
import resource
import sys
import time

d, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = [os.open(os.path.join(d, "c%d" % i), os.O_RDWR | os.O_CREAT, 0o600) for i in range(n)]
for fd in fds:
    fcntl.flock(fd, fcntl.LOCK_SH)
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for fd in random.sample(fds, 64):
        fcntl.flock(fd, fcntl.LOCK_UN)
        fcntl.flock(fd, fcntl.LOCK_SH)
