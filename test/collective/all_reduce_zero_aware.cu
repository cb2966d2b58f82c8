// echo::all_reduce with quant::zero_aware equals echo::reference bit for bit (see sweep.cuh).
#include "collective/sweep.cuh"

ECHO_SWEEP_TESTS(zero_aware)
