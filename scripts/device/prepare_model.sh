# Sourced: the full trellis2-shape-1024 synthetic checkpoint and the benchmark payloads in
# /tmp/s3d (kept while the machine stays warm), and the asset names the scripts use.
W=/tmp/s3d; mkdir -p $W
[ -f $W/shape.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-shape-1024 --seed 1 --out $W/shape > "$OUT/make.log" 2>&1
[ -f $W/pl/manifest.json ] || $BIN/sparse3d make-payloads --set benchmark --out $W/pl >> "$OUT/make.log" 2>&1
DEFAULT_ASSETS=$(python3 -c "import json;print(' '.join(a['name'] for a in json.load(open('$W/pl/manifest.json'))['assets'] if a['set']=='default'))")
SMALL=$(echo $DEFAULT_ASSETS | cut -d' ' -f1)
MID=$(echo $DEFAULT_ASSETS | cut -d' ' -f6)
LARGE=$(echo $DEFAULT_ASSETS | awk '{print $NF}')
