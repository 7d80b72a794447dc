/* SWIG interface of the NNP plugin's Python module (openmmnnp._nnpswig, used by openmmnnp). */
%module(package="openmmnnp") nnpswig

%import(module="openmm") "swig/OpenMMSwigHeaders.i"
%include "swig/typemaps.i"
%include <std_string.i>

%{
#include "NNPForce.h"
#include "OpenMM.h"
#include "OpenMMAmoeba.h"
#include "OpenMMDrude.h"
#include "openmm/RPMDIntegrator.h"
#include "openmm/RPMDMonteCarloBarostat.h"
%}

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

%apply int& OUTPUT { int& particle, int& atomicNumber, int& batch };

%pythonappend NNPPlugin::NNPForce::getBatchEnergies(OpenMM::Context& context) const %{
    val = unit.Quantity(list(val), unit.kilojoule_per_mole)
%}
%pythonappend NNPPlugin::NNPForce::getCutoff() const %{
    val = unit.Quantity(val, unit.nanometer)
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
    void getAtomParameters(int index, int& particle, int& atomicNumber, int& batch) const;
    void setAtomParameters(int index, int particle, int atomicNumber, int batch);
    int getNumBatches() const;
    void setEnsembleMember(int member);
    int getEnsembleMember() const;
    void setUsesPeriodicBoundaryConditions(bool periodic);
    bool usesPeriodicBoundaryConditions() const;
    void setEmbedModelInXml(bool embed);
    bool getEmbedModelInXml() const;
    std::vector<double> getBatchEnergies(OpenMM::Context& context) const;
    void updateParametersInContext(OpenMM::Context& context);
    static std::vector<std::string> getPluginLoadFailures();

    %extend {
        /** An OpenMM Force (e.g. from System.getForce()) as an NNPForce. */
        static NNPPlugin::NNPForce& cast(OpenMM::Force& force) {
            NNPPlugin::NNPForce* result = dynamic_cast<NNPPlugin::NNPForce*>(&force);
            if (result == NULL) throw OpenMM::OpenMMException("NNPForce.cast: the force is not an NNPForce");
            return *result;
        }
        /** Whether an OpenMM Force is an NNPForce. */
        static bool isinstance(OpenMM::Force& force) {
            return dynamic_cast<NNPPlugin::NNPForce*>(&force) != NULL;
        }
    }
};

}
