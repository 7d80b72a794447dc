#include "NNPForce.h"
#include "NNPForceProxy.h"
#include "NNPIntegratorProxies.h"
#include "NNPIntegrators.h"
#include "openmm/serialization/SerializationProxy.h"

#include <typeinfo>

/* Registers the XML proxies when the library is loaded, so that XmlSerializer knows NNPForce and the integrators as
   soon as any program (C++, C or Python) has loaded libOpenMMNNP. OpenMM keeps the pointer for the
   life of the process, so the proxy is a static object rather than a never-freed allocation. */
__attribute__((constructor)) static void registerNNPSerializationProxies() {
    static NNPPlugin::NNPForceProxy proxy;
    static NNPPlugin::NNPVerletIntegratorProxy verlet;
    static NNPPlugin::NNPLangevinIntegratorProxy langevin;
    OpenMM::SerializationProxy::registerProxy(typeid(NNPPlugin::NNPForce), &proxy);
    OpenMM::SerializationProxy::registerProxy(typeid(NNPPlugin::NNPVerletIntegrator), &verlet);
    OpenMM::SerializationProxy::registerProxy(typeid(NNPPlugin::NNPLangevinIntegrator), &langevin);
}
