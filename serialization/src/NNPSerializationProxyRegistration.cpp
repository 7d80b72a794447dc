#include "NNPForce.h"
#include "NNPForceProxy.h"
#include "openmm/serialization/SerializationProxy.h"

#include <typeinfo>

/* Registers the XML proxies when the library is loaded, so that XmlSerializer knows NNPForce as
   soon as any program (C++, C or Python) has loaded libOpenMMNNP. */
__attribute__((constructor)) static void registerNNPSerializationProxies() {
    OpenMM::SerializationProxy::registerProxy(typeid(NNPPlugin::NNPForce), new NNPPlugin::NNPForceProxy());
}
