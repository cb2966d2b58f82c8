// echo::all_reduce with quant::symmetric equals echo::reference bit for bit (see sweep.cuh).
#include "collective/sweep.cuh"

ECHO_SWEEP_TESTS(symmetric)
