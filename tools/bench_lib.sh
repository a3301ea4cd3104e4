# Helpers the bench-*.sh scripts share (sourced): medians over runs and the
# ratios and differences their tables print.

# The median of the numbers on standard input, one a line ("nan" for none).
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# A / B to three places ("nan" when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "nan"; else printf "%.3f", a / b }'; }
# A - B in microseconds, signed.
diff_us() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.3f us", a - b }'; }
