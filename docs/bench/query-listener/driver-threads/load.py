"""POST COUNT orders at RATE/s to the orders service (the saga's own load generator).
Usage: load.py ORDERS_URL COUNT RATE"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from saga_harness.load import place_orders

url, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
began = time.time()
placed = place_orders(url, count, rate=rate)
print(len(placed), "placed in", round(time.time() - began, 1), "s")
