set terminal pngcairo size 960,600 noenhanced font ',10'
set output 'bench/results/2026-11-21-vm-brisk/sweep/sweep_p95.png'
set title 'P95 latency - SmolLM2-135M-Instruct.Q4_1 - brisk'
set xlabel 'max concurrency'
set ylabel 'P95 latency (ms)'
set grid
set key bottom right
$d << EOD
1 145.723 1.13846 175.134 6.23298 7.41448 963.398
4 209.474 1.63652 656.14 18.638 16.4567 2561.32
16 253.686 1.98192 2086.05 61.7368 52.154 8704.25
64 290.022 2.26579 18718.5 109.105 402.394 31453.5
EOD
set logscale x 2
set logscale y
set key top left
plot $d using 1:($4>0?$4:NaN) with linespoints lw 2 title 'TTFT', $d using 1:($5>0?$5:NaN) with linespoints lw 2 title 'TPOT', $d using 1:($6>0?$6:NaN) with linespoints lw 2 title 'ITL', $d using 1:($7>0?$7:NaN) with linespoints lw 2 title 'E2E'
