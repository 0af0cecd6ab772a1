# Nsight Compute sections side by side (warp stalls, schedulers, memory, compute) for launches of
# lab/ncu_clock.py: prints the metrics that differ between them (and every stall reason).
# usage: PYTHONPATH=src OUT=dir bash lab/ncu_compare.sh MxNxK kernel-or-cublas...  (NCU_DTYPE,
# NCU_LAYOUT as for lab/ncu_clock.sh); writes dir/ncu-cmp-MxNxK.csv
s=$1; shift
ncu --clock-control none --profile-from-start off --csv --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,dram__bytes_read.sum \
  python3 lab/ncu_clock.py run "$s" "$@" > $OUT/ncu-cmp-$s.csv 2>/tmp/ncu-err.txt || tail -5 /tmp/ncu-err.txt
python3 - $OUT/ncu-cmp-$s.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ii = h.index("ID"); mi = h.index("Metric Name"); vi = h.index("Metric Value"); ki = h.index("Kernel Name"); ui = h.index("Metric Unit")
by = collections.defaultdict(dict)
for r in rows[1:]:
    by[r[mi]][r[ii]] = (r[vi], r[ui])
ids = sorted({r[ii] for r in rows[1:]}, key=int)
names = {r[ii]: r[ki][:30] for r in rows[1:]}
print("metric".ljust(70), " | ".join(names[i].ljust(22) for i in ids))
for m, v in by.items():
    vals = [v.get(i, ("", ""))[0] for i in ids]
    if len(set(vals)) > 1 or "Stall" in m:
        print(m[:70].ljust(70), " | ".join((x + " " + v.get(i, ("",""))[1])[:22].ljust(22) for x, i in zip(vals, ids)))
PY
