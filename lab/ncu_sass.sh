# The SASS of any launch, cuBLAS's included, with its executed-instruction and stall counts.
# cuBLAS's Hopper GEMMs (nvjet_*) are not in libcublasLt as cubins that cuobjdump can list: their
# names appear nowhere in the library's ELF images. Nsight Compute saves the code of every kernel it
# profiles in its report, so this profiles one launch of each named config of lab/ncu_clock.py (or
# "cublas") with the source-level counters, then prints each launch's SASS listing to a CSV.
# lab/ncu_sass_summary.py reduces the CSVs to counts that can be committed (a listing of cuBLAS is
# NVIDIA's code: not stored).
# usage: NCU_OUT=dir [NCU_LAYOUT=nt] bash lab/ncu_sass.sh TAG MxNxK kernel-or-cublas...
# writes dir/ncu-sass-TAG.ncu-rep and dir/ncu-sass-TAG-<id>.csv (one a launch; Nsight Compute 2025.3
# filters an imported report by --launch-skip / --launch-count)
tag=$1; s=$2; shift 2
out="${NCU_OUT:-/tmp}"
rep="$out/ncu-sass-$tag"
ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight -f -o "$rep" python3 lab/ncu_clock.py run "$s" "$@" > "$rep.log" 2>&1 || tail -5 "$rep.log"
n=$#
for ((i = 0; i < n; i++)); do
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv --launch-skip $i --launch-count 1 \
    > "$rep-$i.csv" 2> "$rep-$i.err" || tail -3 "$rep-$i.err"
  echo "== launch $i: $(wc -l < "$rep-$i.csv") lines, $(grep -c GMMA "$rep-$i.csv") GMMA lines"
done
