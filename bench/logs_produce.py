"""Writes 100-byte lines to stdout as fast as it can for SECS seconds, then writes the number
of bytes written to OUT. The producer of the logs benchmark: run as a service, and piped to
`cat > /dev/null` for the baseline."""

import os
import sys
import time

secs, out = float(sys.argv[1]), sys.argv[2]
line = b"%s\n" % (b"x" * 99)
block = line * 655  # 65500 bytes
written = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    written += os.write(1, block)
with open(out + ".tmp", "w") as f:
    f.write(str(written))
os.rename(out + ".tmp", out)
