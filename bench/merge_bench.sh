#!/usr/bin/env bash
# gemmakit merge against the disk's own copy speed on a 31B-shaped checkpoint (docs/PERF.md
# "Merge"): cp + sync of the shards is the physical limit of a read-transform-write of the
# same bytes. Needs root for drop_caches (cold page cache for every run) and 2 × the
# checkpoint's size of free disk in WORK.
# usage: bench/merge_bench.sh GEMMAKIT WORK [LAYERS=12] [REPEATS=2]
set -euo pipefail
GK=$(realpath "$1"); WORK=$2; LAYERS=${3:-12}; REPEATS=${4:-2}
HERE=$(dirname "$(realpath "$0")")
mkdir -p "$WORK" && cd "$WORK"
[ -d base ] || "$GK" init --preset 31b --num-layers "$LAYERS" --out base --seed 1
[ -d adapter ] || /usr/bin/python3 "$HERE/make_random_adapter.py" base adapter
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for i in $(seq "$REPEATS"); do
  rm -rf copy merged; mkdir copy; cold
  s=$(date +%s.%N); cp base/*.safetensors copy/ && sync; e=$(date +%s.%N)
  cp_s=$(echo "$e - $s" | bc); rm -rf copy; cold
  /usr/bin/time -f "%e %M" -o merge.time "$GK" merge --base base --adapter adapter --out merged >/dev/null
  read -r merge_s rss_kb < merge.time
  echo "run $i: cp+sync ${cp_s} s, merge ${merge_s} s: $(echo "scale=2; $cp_s / $merge_s" | bc) of cp;" \
       "peak RSS $(echo "scale=2; $rss_kb / 1048576" | bc) GiB; load $(cut -d' ' -f1 /proc/loadavg)"
  rm -rf merged
done
