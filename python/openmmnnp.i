/* SWIG interface of the NNP plugin's Python module (openmmnnp._nnpswig, used by openmmnnp). */
%module(package="openmmnnp") nnpswig

%import(module="openmm") "swig/OpenMMSwigHeaders.i"
%include "swig/typemaps.i"
%include <std_string.i>

%{
#include "NNPForce.h"
#include "NNPIntegrators.h"
#include "OpenMM.h"
#include "OpenMMAmoeba.h"
#include "OpenMMDrude.h"
#include "openmm/RPMDIntegrator.h"
#include "openmm/RPMDMonteCarloBarostat.h"
#include "openmm/serialization/XmlSerializer.h"
#include <climits>
#include <sstream>
%}

%newobject NNPPlugin::NNPForce::_clone;
%newobject NNPPlugin::NNPForce::_deserialize;

/* C++ exceptions become openmm.OpenMMException. */
%exception {
    try {
        $action
    } catch (const std::exception& e) {
        PyObject* module = PyImport_ImportModule("openmm");
        PyObject* type = module ? PyObject_GetAttrString(module, "OpenMMException") : NULL;
        PyErr_Clear();
        PyErr_SetString(type ? type : PyExc_Exception, e.what());
        Py_XDECREF(type);
        Py_XDECREF(module);
        SWIG_fail;
    }
}

/* Vectors come back as Python lists. */
%typemap(out) std::vector<double> {
    const std::vector<double>& v = $1;
    $result = PyList_New(v.size());
    for (size_t i = 0; i < v.size(); i++) PyList_SetItem($result, i, PyFloat_FromDouble(v[i]));
}
%typemap(out) std::vector<int> {
    const std::vector<int>& v = $1;
    $result = PyList_New(v.size());
    for (size_t i = 0; i < v.size(); i++) PyList_SetItem($result, i, PyLong_FromLong(v[i]));
}
%typemap(out) std::vector<std::string> {
    const std::vector<std::string>& v = $1;
    $result = PyList_New(v.size());
    for (size_t i = 0; i < v.size(); i++) PyList_SetItem($result, i, PyUnicode_FromString(v[i].c_str()));
}

/* Sequences of Python ints (lists; NumPy arrays arrive as lists through openmmnnp) as vector<int>. */
%typemap(in) const std::vector<int>& (std::vector<int> v) {
    PyObject* seq = PySequence_Fast($input, "expected a sequence of integers");
    if (seq == NULL) SWIG_fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    v.reserve(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
        long value = PyLong_Check(item) && !PyBool_Check(item) ? PyLong_AsLong(item) : -1;
        if (!PyLong_Check(item) || PyBool_Check(item) || (value == -1 && PyErr_Occurred()) || value < INT_MIN || value > INT_MAX) {
            PyErr_Clear();
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError, "expected integers in the 32-bit range (item %zd)", i);
            SWIG_fail;
        }
        v.push_back((int)value);
    }
    Py_DECREF(seq);
    $1 = &v;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const std::vector<int>& {
    $1 = PySequence_Check($input) ? 1 : 0;
}

%apply int& OUTPUT { int& particle, int& atomicNumber, int& batch };

%pythonappend NNPPlugin::NNPForce::getBatchEnergies(OpenMM::Context& context) const %{
    val = unit.Quantity(list(val), unit.kilojoule_per_mole)
%}
%pythonappend NNPPlugin::NNPForce::getCutoff() const %{
    val = unit.Quantity(val, unit.nanometer)
%}
%pythonappend NNPPlugin::NNPLangevinIntegrator::getTemperature() const %{
    val = unit.Quantity(val, unit.kelvin)
%}
%pythonappend NNPPlugin::NNPLangevinIntegrator::getFriction() const %{
    val = unit.Quantity(val, 1 / unit.picosecond)
%}
/* A cast result refers into the original object: keep that alive as long as the result. */
%pythonappend NNPPlugin::NNPGraphIntegrator::cast(OpenMM::Integrator& integrator) %{
    val._nnp_owner = integrator
%}
%pythonappend NNPPlugin::NNPVerletIntegrator::cast(OpenMM::Integrator& integrator) %{
    val._nnp_owner = integrator
%}
%pythonappend NNPPlugin::NNPLangevinIntegrator::cast(OpenMM::Integrator& integrator) %{
    val._nnp_owner = integrator
%}
%pythonbegin %{
from openmm import unit
%}

namespace NNPPlugin {

class NNPForce : public OpenMM::Force {
public:
    NNPForce(const std::string& modelPath);
    const std::string& getModelPath() const;
    std::string getModelName() const;
    int getNumEnsembleMembers() const;
    std::vector<int> getSupportedElements() const;
    double getCutoff() const;
    int getNumAtoms() const;
    int addAtom(int particle, int atomicNumber, int batch);
    int addAtoms(const std::vector<int>& particles, const std::vector<int>& atomicNumbers, const std::vector<int>& batches);
    void getAtomParameters(int index, int& particle, int& atomicNumber, int& batch) const;
    void setAtomParameters(int index, int particle, int atomicNumber, int batch);
    int getNumBatches() const;
    void setBatchCharge(int batch, int charge);
    int getBatchCharge(int batch) const;
    std::string getModelFamily() const;
    void setEnsembleMember(int member);
    int getEnsembleMember() const;
    void setUsesPeriodicBoundaryConditions(bool periodic);
    bool usesPeriodicBoundaryConditions() const;
    void setEmbedModelInXml(bool embed);
    bool getEmbedModelInXml() const;
    std::vector<double> getBatchEnergies(OpenMM::Context& context) const;
    void updateParametersInContext(OpenMM::Context& context);
    static std::vector<std::string> getPluginLoadFailures();
    static std::string findModel(const std::string& nameOrPath);
    static std::vector<std::string> getModelSearchPath();
    static void convertModel(const std::string& source, const std::string& destination);

    %extend {
        /** An OpenMM Force (e.g. from System.getForce()) as an NNPForce. */
        static NNPPlugin::NNPForce& cast(OpenMM::Force& force) {
            NNPPlugin::NNPForce* result = dynamic_cast<NNPPlugin::NNPForce*>(&force);
            if (result == NULL) throw OpenMM::OpenMMException("NNPForce.cast: the force is not an NNPForce");
            return *result;
        }
        /** A new NNPForce equal to this one (through OpenMM's serialization, as OpenMM's forces copy). */
        NNPPlugin::NNPForce* _clone() const {
            return dynamic_cast<NNPPlugin::NNPForce*>(OpenMM::XmlSerializer::clone<OpenMM::Force>(*self));
        }
        /** A new NNPForce from XML written by XmlSerializer (pickle support). */
        static NNPPlugin::NNPForce* _deserialize(const std::string& xml) {
            std::istringstream in(xml);
            OpenMM::Force* force = OpenMM::XmlSerializer::deserialize<OpenMM::Force>(in);
            NNPPlugin::NNPForce* result = dynamic_cast<NNPPlugin::NNPForce*>(force);
            if (result == NULL) {
                delete force;
                throw OpenMM::OpenMMException("NNPForce: the XML does not hold an NNPForce");
            }
            return result;
        }
        /** Whether an OpenMM Force is an NNPForce. */
        static bool isinstance(OpenMM::Force& force) {
            return dynamic_cast<NNPPlugin::NNPForce*>(&force) != NULL;
        }
    }
};


/**
 * Base of the plugin's integrators: on CUDA, whole steps are recorded into CUDA graphs and replayed.
 */
class NNPGraphIntegrator : public OpenMM::Integrator {
public:
    int getStepsPerGraph() const;
    void setStepsPerGraph(int steps);
    bool getUseGraphs() const;
    void setUseGraphs(bool use);
    virtual void step(int steps);
    bool isReplayingGraphs() const;
    std::string getFallbackReason() const;
    int getNumGraphRecordings() const;
    virtual bool isStochastic() const = 0;
    %extend {
        /** An OpenMM Integrator (e.g. from XmlSerializer.deserialize) as the plugin's integrator. */
        static NNPPlugin::NNPGraphIntegrator& cast(OpenMM::Integrator& integrator) {
            NNPPlugin::NNPGraphIntegrator* result = dynamic_cast<NNPPlugin::NNPGraphIntegrator*>(&integrator);
            if (result == NULL) throw OpenMM::OpenMMException("NNPGraphIntegrator.cast: not an NNP integrator");
            return *result;
        }
    }
};

/** Leapfrog Verlet (OpenMM's VerletIntegrator algorithm); stepSize in ps or a Quantity. */
class NNPVerletIntegrator : public NNPGraphIntegrator {
public:
    NNPVerletIntegrator(double stepSize);
    virtual bool isStochastic() const;
    %extend {
        static NNPPlugin::NNPVerletIntegrator& cast(OpenMM::Integrator& integrator) {
            NNPPlugin::NNPVerletIntegrator* result = dynamic_cast<NNPPlugin::NNPVerletIntegrator*>(&integrator);
            if (result == NULL) throw OpenMM::OpenMMException("NNPVerletIntegrator.cast: not an NNPVerletIntegrator");
            return *result;
        }
    }
};

/** Langevin dynamics (OpenMM's LangevinMiddleIntegrator scheme); K, 1/ps, ps or Quantities. */
class NNPLangevinIntegrator : public NNPGraphIntegrator {
public:
    NNPLangevinIntegrator(double temperature, double frictionCoeff, double stepSize);
    double getTemperature() const;
    void setTemperature(double temp);
    double getFriction() const;
    void setFriction(double coeff);
    int getRandomNumberSeed() const;
    void setRandomNumberSeed(int seed);
    virtual bool isStochastic() const;
    %extend {
        static NNPPlugin::NNPLangevinIntegrator& cast(OpenMM::Integrator& integrator) {
            NNPPlugin::NNPLangevinIntegrator* result = dynamic_cast<NNPPlugin::NNPLangevinIntegrator*>(&integrator);
            if (result == NULL) throw OpenMM::OpenMMException("NNPLangevinIntegrator.cast: not an NNPLangevinIntegrator");
            return *result;
        }
    }
};

}
