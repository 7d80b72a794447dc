#ifndef OPENMM_NNPINTEGRATORS_H_
#define OPENMM_NNPINTEGRATORS_H_

#include "internal/windowsExportNNP.h"
#include "openmm/Integrator.h"
#include "openmm/Kernel.h"

#include <string>

namespace NNPPlugin {

/**
 * Base of the plugin's integrators: on the CUDA platform, whole steps (the forces of every Force in
 * the System plus the integration kernels) are recorded once into CUDA graphs and replayed.
 *
 * step(n) first runs one eager step after anything that needs host work (the first step of a
 * Context, a changed parameter, ...), then replays a graph of getStepsPerGraph() steps as often
 * as it fits, and covers what is left with graphs of 2^j steps (each recorded the first time it is
 * needed). The step count and the time advance exactly as with eager steps. A graph is recorded
 * again only when something it baked in changes: see docs/integrators.md for the exact list.
 *
 * On other platforms, when setUseGraphs(false) was called, or when the System holds a Force that
 * cannot be recorded (the first step names it in one warning on stderr and getFallbackReason()
 * returns it), every step runs eagerly with the same kernels.
 */
class OPENMM_EXPORT_NNP NNPGraphIntegrator : public OpenMM::Integrator {
public:
    NNPGraphIntegrator(double stepSize);
    /** Sets the step size in ps: finite and > 0 (anything else throws OpenMMException). */
    void setStepSize(double size) override;
    /** Steps recorded into one graph (default 20). */
    int getStepsPerGraph() const { return stepsPerGraph; }
    /** Sets the steps per graph (>= 1); a Context records new graphs at its next step. */
    void setStepsPerGraph(int steps);
    /** Whether graphs are used where the platform supports them (default true). */
    bool getUseGraphs() const { return useGraphs; }
    void setUseGraphs(bool use) { useGraphs = use; }
    /** Advances the simulation by `steps` time steps. */
    void step(int steps) override;
    /** True while bound to a Context whose steps are replayed from graphs (after the first step). */
    bool isReplayingGraphs() const;
    /** Why steps run eagerly in this Context ("" when graphs are in use or not yet tried). */
    std::string getFallbackReason() const;
    /** How many graphs the current Context has recorded so far (a diagnostic; 0 when eager). */
    int getNumGraphRecordings() const;
    /** True for the Langevin integrator. */
    virtual bool isStochastic() const = 0;

protected:
    void initialize(OpenMM::ContextImpl& context) override;
    void cleanup() override;
    std::vector<std::string> getKernelNames() override;
    double computeKineticEnergy() override;
    void stateChanged(OpenMM::State::DataType changed) override;
    void createCheckpoint(std::ostream& stream) const override;
    void loadCheckpoint(std::istream& stream) override;
    double getVelocityTimeOffset() const override { return getStepSize() / 2; }

private:
    OpenMM::Kernel kernel;
    int stepsPerGraph;
    bool useGraphs;
};

/**
 * Leapfrog Verlet, step for step the algorithm of OpenMM's VerletIntegrator (on CPU and Reference it
 * runs OpenMM's own kernel; on CUDA it records OpenMM's CUDA kernel into graphs).
 */
class OPENMM_EXPORT_NNP NNPVerletIntegrator : public NNPGraphIntegrator {
public:
    /** stepSize in ps. */
    explicit NNPVerletIntegrator(double stepSize);
    bool isStochastic() const override { return false; }
};

/**
 * Langevin dynamics with the LFMiddle discretisation of OpenMM's LangevinMiddleIntegrator. On CPU and
 * Reference it runs OpenMM's own kernel (same seed, same trajectory as LangevinMiddleIntegrator). On
 * CUDA the random numbers are drawn on the device from a counter-based generator (Philox-4x32-10,
 * key = seed, counter = atom and a device-side step counter), so every replayed step draws new
 * numbers; the same seed gives the same trajectory with or without graphs.
 */
class OPENMM_EXPORT_NNP NNPLangevinIntegrator : public NNPGraphIntegrator {
public:
    /** temperature in K, frictionCoeff in 1/ps, stepSize in ps. */
    NNPLangevinIntegrator(double temperature, double frictionCoeff, double stepSize);
    double getTemperature() const { return temperature; }
    void setTemperature(double temp);
    double getFriction() const { return friction; }
    void setFriction(double coeff);
    int getRandomNumberSeed() const { return randomNumberSeed; }
    /** 0 (the default) picks a new seed for every Context. Read when a Context is created. */
    void setRandomNumberSeed(int seed) { randomNumberSeed = seed; }
    bool isStochastic() const override { return true; }

protected:
    bool kineticEnergyRequiresForce() const override { return false; }

private:
    double temperature, friction;
    int randomNumberSeed;
};

} // namespace NNPPlugin

#endif
