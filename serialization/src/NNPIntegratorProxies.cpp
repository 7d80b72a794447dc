#include "NNPIntegratorProxies.h"
#include "NNPIntegrators.h"
#include "openmm/OpenMMException.h"
#include "openmm/serialization/SerializationNode.h"

#include <memory>

using namespace NNPPlugin;
using namespace OpenMM;

static void storeCommon(const NNPGraphIntegrator& integrator, SerializationNode& node) {
    node.setDoubleProperty("stepSize", integrator.getStepSize());
    node.setDoubleProperty("constraintTolerance", integrator.getConstraintTolerance());
    node.setIntProperty("integrationForceGroups", integrator.getIntegrationForceGroups());
    node.setIntProperty("stepsPerGraph", integrator.getStepsPerGraph());
    node.setBoolProperty("useGraphs", integrator.getUseGraphs());
}

static void loadCommon(NNPGraphIntegrator& integrator, const SerializationNode& node) {
    integrator.setConstraintTolerance(node.getDoubleProperty("constraintTolerance"));
    integrator.setIntegrationForceGroups(node.getIntProperty("integrationForceGroups", 0xFFFFFFFF));
    integrator.setStepsPerGraph(node.getIntProperty("stepsPerGraph", 20));
    integrator.setUseGraphs(node.getBoolProperty("useGraphs", true));
}

static void checkVersion(const SerializationNode& node, const char* type) {
    int version = node.getIntProperty("version");
    if (version != 1)
        throw OpenMMException(std::string(type) + ": unsupported XML version " + std::to_string(version) + " (this build reads version 1)");
}

NNPVerletIntegratorProxy::NNPVerletIntegratorProxy() : SerializationProxy("NNPVerletIntegrator") {}

void NNPVerletIntegratorProxy::serialize(const void* object, SerializationNode& node) const {
    node.setIntProperty("version", 1);
    storeCommon(*reinterpret_cast<const NNPVerletIntegrator*>(object), node);
}

void* NNPVerletIntegratorProxy::deserialize(const SerializationNode& node) const {
    checkVersion(node, "NNPVerletIntegrator");
    std::unique_ptr<NNPVerletIntegrator> integrator(new NNPVerletIntegrator(node.getDoubleProperty("stepSize")));
    loadCommon(*integrator, node);
    return integrator.release();
}

NNPLangevinIntegratorProxy::NNPLangevinIntegratorProxy() : SerializationProxy("NNPLangevinIntegrator") {}

void NNPLangevinIntegratorProxy::serialize(const void* object, SerializationNode& node) const {
    const NNPLangevinIntegrator& integrator = *reinterpret_cast<const NNPLangevinIntegrator*>(object);
    node.setIntProperty("version", 1);
    storeCommon(integrator, node);
    node.setDoubleProperty("temperature", integrator.getTemperature());
    node.setDoubleProperty("friction", integrator.getFriction());
    node.setIntProperty("randomSeed", integrator.getRandomNumberSeed());
}

void* NNPLangevinIntegratorProxy::deserialize(const SerializationNode& node) const {
    checkVersion(node, "NNPLangevinIntegrator");
    std::unique_ptr<NNPLangevinIntegrator> integrator(new NNPLangevinIntegrator(
        node.getDoubleProperty("temperature"), node.getDoubleProperty("friction"), node.getDoubleProperty("stepSize")));
    loadCommon(*integrator, node);
    integrator->setRandomNumberSeed(node.getIntProperty("randomSeed"));
    return integrator.release();
}
