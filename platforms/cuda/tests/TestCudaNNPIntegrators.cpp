/* NNPVerletIntegrator and NNPLangevinIntegrator on the CUDA platform: whole steps from CUDA graphs.
   NNP_GRAPH_PRECISION picks the precision (default mixed); NNP_TEST_HEAVY=0 runs the energy drift on
   2 molecules instead of 100; NNP_TEST_QUICK=1 skips the statistics and the drift (compute-sanitizer). */
#include "TestNNPIntegrators.h"

const char* platformName = "CUDA";
static const char* precision() {
    const char* p = getenv("NNP_GRAPH_PRECISION");
    return p && p[0] ? p : "mixed";
}
std::map<string, string> platformProperties = {{"Precision", precision()}};
