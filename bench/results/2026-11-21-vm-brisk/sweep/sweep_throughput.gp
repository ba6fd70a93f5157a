set terminal pngcairo size 960,600 noenhanced font ',10'
set output 'bench/results/2026-11-21-vm-brisk/sweep/sweep_throughput.png'
set title 'throughput - SmolLM2-135M-Instruct.Q4_1 - brisk'
set xlabel 'max concurrency'
set ylabel 'output tokens/s'
set grid
set key bottom right
$d << EOD
1 145.723 1.13846 175.134 6.23298 7.41448 963.398
4 209.474 1.63652 656.14 18.638 16.4567 2561.32
16 253.686 1.98192 2086.05 61.7368 52.154 8704.25
64 290.022 2.26579 18718.5 109.105 402.394 31453.5
EOD
set logscale x 2
set key top left
set y2label 'requests/s'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot $d using 1:2 with linespoints lw 2 title 'output tok/s', $d using 1:3 axes x1y2 with linespoints lw 2 title 'req/s'
