# Nsight Compute's view of each named launch (lab/ncu_clock.py): the SM clock it ran at, its
# tensor-pipe share, and its L2 reads before and after the L2 request coalescer (LRC) -- multicast
# ("programmatic") and identical requests merged in flight ("hardware").
# usage: [NCU_OUT=dir] PYTHONPATH=src bash lab/ncu_clock.sh MxNxK kernel-or-cublas...
# writes NCU_OUT/ncu-clock-MxNxK.csv (default /tmp) and prints one line a launch
s=$1; shift
csv="${NCU_OUT:-/tmp}/ncu-clock-$s.csv"
lrc=lrc__request_sectors_op_read_coalescable.sum,lrc__request_sectors_op_read_coalescing_type_programmatic.sum
lrc=$lrc,lrc__lrc2xbar_sectors_op_read.sum,lrc__lrc2xbar_sectors_op_read.avg,lrc__lrc2xbar_sectors_op_read_coalescing_achieved_type_hardware.sum
ncu --clock-control none --profile-from-start off --csv --section SpeedOfLight \
  --metrics "lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__inst_executed.sum,$lrc" \
  python3 lab/ncu_clock.py run "$s" "$@" > "$csv" 2>/tmp/ncu-err.txt || tail -5 /tmp/ncu-err.txt
echo "== $s"; python3 lab/ncu_clock.py table "$csv"
