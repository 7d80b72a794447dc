#include "NNPIntegrators.h"
#include "NNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "internal/NNPOpenMMStepper.h"
#include "openmm/OpenMMException.h"
#include "openmm/kernels.h"
#include "openmm/internal/ContextImpl.h"

#include <cmath>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;

/* ------------------------------------------------------------------ NNPGraphIntegrator */

NNPGraphIntegrator::NNPGraphIntegrator(double stepSize) : stepsPerGraph(20), useGraphs(true) {
    setStepSize(stepSize);
    setConstraintTolerance(1e-5);
    NNPForceImpl::loadPlatformPlugins(); // platforms must know the kernel before a Context is made
}

void NNPGraphIntegrator::setStepSize(double size) {
    if (!(size > 0) || !std::isfinite(size))
        throw OpenMMException("NNPGraphIntegrator: the step size must be finite and > 0 ps, got " + std::to_string(size));
    Integrator::setStepSize(size);
}

void NNPGraphIntegrator::setStepsPerGraph(int steps) {
    if (steps < 1) throw OpenMMException("NNPGraphIntegrator: steps per graph must be at least 1, got " + std::to_string(steps));
    stepsPerGraph = steps;
}

void NNPGraphIntegrator::initialize(ContextImpl& contextRef) {
    if (owner != nullptr && &contextRef.getOwner() != owner)
        throw OpenMMException("This Integrator is already bound to a context");
    context = &contextRef;
    owner = &contextRef.getOwner();
    kernel = contextRef.getPlatform().createKernel(IntegrateNNPStepKernel::Name(), contextRef);
    kernel.getAs<IntegrateNNPStepKernel>().initialize(contextRef.getSystem(), *this);
}

void NNPGraphIntegrator::cleanup() { kernel = Kernel(); }

std::vector<string> NNPGraphIntegrator::getKernelNames() { return {IntegrateNNPStepKernel::Name()}; }

void NNPGraphIntegrator::step(int steps) {
    if (context == nullptr) throw OpenMMException("This Integrator is not bound to a context!");
    if (steps < 0) throw OpenMMException("step: the number of steps must not be negative, got " + std::to_string(steps));
    kernel.getAs<IntegrateNNPStepKernel>().execute(*context, *this, steps);
}

double NNPGraphIntegrator::computeKineticEnergy() {
    return kernel.getAs<IntegrateNNPStepKernel>().computeKineticEnergy(*context, *this);
}

void NNPGraphIntegrator::stateChanged(State::DataType changed) {
    if (context != nullptr) kernel.getAs<IntegrateNNPStepKernel>().stateChanged(changed);
}

bool NNPGraphIntegrator::isReplayingGraphs() const {
    return context != nullptr && kernel.getAs<const IntegrateNNPStepKernel>().isReplayingGraphs();
}

string NNPGraphIntegrator::getFallbackReason() const {
    return context == nullptr ? "" : kernel.getAs<const IntegrateNNPStepKernel>().getFallbackReason();
}

int NNPGraphIntegrator::getNumGraphRecordings() const {
    return context == nullptr ? 0 : kernel.getAs<const IntegrateNNPStepKernel>().getNumGraphRecordings();
}

void NNPGraphIntegrator::createCheckpoint(std::ostream& stream) const {
    kernel.getAs<const IntegrateNNPStepKernel>().createCheckpoint(stream);
}

void NNPGraphIntegrator::loadCheckpoint(std::istream& stream) { kernel.getAs<IntegrateNNPStepKernel>().loadCheckpoint(stream); }

NNPVerletIntegrator::NNPVerletIntegrator(double stepSize) : NNPGraphIntegrator(stepSize) {}

NNPLangevinIntegrator::NNPLangevinIntegrator(double temperature, double frictionCoeff, double stepSize)
    : NNPGraphIntegrator(stepSize), temperature(0), friction(0), randomNumberSeed(0) {
    setTemperature(temperature);
    setFriction(frictionCoeff);
}

void NNPLangevinIntegrator::setTemperature(double temp) {
    if (!(temp >= 0) || !std::isfinite(temp))
        throw OpenMMException("NNPLangevinIntegrator: temperature must be finite and >= 0 K, got " + std::to_string(temp));
    temperature = temp;
}

void NNPLangevinIntegrator::setFriction(double coeff) {
    if (!(coeff >= 0) || !std::isfinite(coeff))
        throw OpenMMException("NNPLangevinIntegrator: friction must be finite and >= 0 /ps, got " + std::to_string(coeff));
    friction = coeff;
}

/* ------------------------------------------------------------------ OpenMM's own step kernels */

void NNPOpenMMStepper::sync(const NNPGraphIntegrator& integrator) {
    Integrator* mirror = verlet ? static_cast<Integrator*>(verlet.get()) : static_cast<Integrator*>(langevin.get());
    if (mirror->getStepSize() != integrator.getStepSize()) mirror->setStepSize(integrator.getStepSize());
    if (mirror->getConstraintTolerance() != integrator.getConstraintTolerance())
        mirror->setConstraintTolerance(integrator.getConstraintTolerance());
    mirror->setIntegrationForceGroups(integrator.getIntegrationForceGroups());
    if (langevin) {
        const NNPLangevinIntegrator& l = static_cast<const NNPLangevinIntegrator&>(integrator);
        if (langevin->getTemperature() != l.getTemperature()) langevin->setTemperature(l.getTemperature());
        if (langevin->getFriction() != l.getFriction()) langevin->setFriction(l.getFriction());
    }
}

void NNPOpenMMStepper::initialize(ContextImpl& context, const NNPGraphIntegrator& integrator) {
    if (integrator.isStochastic()) {
        const NNPLangevinIntegrator& l = static_cast<const NNPLangevinIntegrator&>(integrator);
        langevin.reset(new LangevinMiddleIntegrator(l.getTemperature(), l.getFriction(), l.getStepSize()));
        langevin->setRandomNumberSeed(l.getRandomNumberSeed());
        sync(integrator);
        kernel = context.getPlatform().createKernel(IntegrateLangevinMiddleStepKernel::Name(), context);
        kernel.getAs<IntegrateLangevinMiddleStepKernel>().initialize(context.getSystem(), *langevin);
    } else {
        verlet.reset(new VerletIntegrator(integrator.getStepSize()));
        sync(integrator);
        kernel = context.getPlatform().createKernel(IntegrateVerletStepKernel::Name(), context);
        kernel.getAs<IntegrateVerletStepKernel>().initialize(context.getSystem(), *verlet);
    }
}

void NNPOpenMMStepper::integrate(ContextImpl& context, const NNPGraphIntegrator& integrator) {
    sync(integrator);
    if (langevin)
        kernel.getAs<IntegrateLangevinMiddleStepKernel>().execute(context, *langevin);
    else
        kernel.getAs<IntegrateVerletStepKernel>().execute(context, *verlet);
}

void NNPOpenMMStepper::step(ContextImpl& context, const NNPGraphIntegrator& integrator) {
    context.updateContextState();
    context.calcForcesAndEnergy(true, false, integrator.getIntegrationForceGroups());
    integrate(context, integrator);
}

double NNPOpenMMStepper::computeKineticEnergy(ContextImpl& context, const NNPGraphIntegrator& integrator) {
    sync(integrator);
    if (langevin) return kernel.getAs<IntegrateLangevinMiddleStepKernel>().computeKineticEnergy(context, *langevin);
    return kernel.getAs<IntegrateVerletStepKernel>().computeKineticEnergy(context, *verlet);
}
