"""The standard library's C functions that the planner's hot loops call, as Final names.

Compiled with mypyc, a Final module name is read from a C static; a name imported the usual way
is looked up in the calling module's globals dict on every call, several times per Mac scanned.
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import Final

bisect_left: Final = bisect.bisect_left
bisect_right: Final = bisect.bisect_right
insort: Final = bisect.insort
heappush: Final = heapq.heappush
heappop: Final = heapq.heappop
log2: Final = math.log2
