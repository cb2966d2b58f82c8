// echo::all_reduce with quant::naive_zero_point equals echo::reference bit for bit (see sweep.cuh).
#include "collective/sweep.cuh"

ECHO_SWEEP_TESTS(naive_zero_point)
