# Nsight Compute over `tf32_small_probe.py launch SHAPE LABEL...` (tc08 configs or cublas, one launch
# each): usage, on the GPU machine, PYTHONPATH=src:probes OUT=dir bash probes/ncu_small.sh 1024 bn64 cublas
s=$1; shift
ncu --clock-control none --profile-from-start off --csv --section SpeedOfLight \
  --metrics lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,launch__grid_size \
  python3 probes/tf32_small_probe.py launch "$s" "$@" > $OUT/ncu-tf32-small-$s.csv 2>/tmp/ncu-err.txt || tail -5 /tmp/ncu-err.txt
python3 - "$OUT/ncu-tf32-small-$s.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; ii = head.index("ID"); mi = head.index("Metric Name"); vi = head.index("Metric Value"); ki = head.index("Kernel Name")
by = collections.defaultdict(dict)
for r in rows[1:]:
    by[(r[ii], r[ki][:40])][r[mi]] = r[vi]
for k, m in by.items():
    print(k, {n: v for n, v in m.items()})
PY
