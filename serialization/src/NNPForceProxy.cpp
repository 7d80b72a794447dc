#include "NNPForceProxy.h"
#include "NNPForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/serialization/SerializationNode.h"

#include <cstdint>
#include <string>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;

static const char* const base64Chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static string toBase64(const string& in) {
    string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        uint32_t v = (uint8_t)in[i] << 16 | (uint8_t)in[i + 1] << 8 | (uint8_t)in[i + 2];
        for (int k = 3; k >= 0; k--) out += base64Chars[(v >> (6 * k)) & 63];
    }
    if (i < in.size()) {
        uint32_t v = (uint8_t)in[i] << 16 | (i + 1 < in.size() ? (uint8_t)in[i + 1] << 8 : 0);
        out += base64Chars[(v >> 18) & 63];
        out += base64Chars[(v >> 12) & 63];
        out += i + 1 < in.size() ? base64Chars[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

static string fromBase64(const string& in) {
    int8_t table[256];
    for (int c = 0; c < 256; c++) table[c] = -1;
    for (int c = 0; c < 64; c++) table[(uint8_t)base64Chars[c]] = c;
    if (in.size() % 4 != 0) throw OpenMMException("NNPForce: the embedded model is not valid base64 (length " + std::to_string(in.size()) + ")");
    string out;
    out.reserve(in.size() / 4 * 3);
    for (size_t i = 0; i < in.size(); i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = in[i + k];
            int8_t d = table[(uint8_t)c];
            if (c == '=' && i + 4 == in.size() && k >= 2) {
                pad++;
                d = 0;
            } else if (d < 0 || pad > 0) {
                throw OpenMMException("NNPForce: the embedded model is not valid base64 (bad character at " + std::to_string(i + k) + ")");
            }
            v = v << 6 | (uint32_t)d;
        }
        out += (char)(v >> 16);
        if (pad < 2) out += (char)(v >> 8 & 0xFF);
        if (pad < 1) out += (char)(v & 0xFF);
    }
    return out;
}

/* An integer attribute, read strictly: all of it a decimal int (OpenMM's getIntProperty takes "12abc" as 12). */
static int strictInt(const SerializationNode& node, const string& name) {
    if (!node.hasProperty(name)) throw OpenMMException("NNPForce: the XML lacks the attribute '" + name + "'");
    const string text = node.getStringProperty(name);
    size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (text.empty() || used != text.size() || value < INT32_MIN || value > INT32_MAX)
        throw OpenMMException("NNPForce: the XML attribute " + name + "=\"" + text.substr(0, 40) + "\" is not an integer");
    return (int)value;
}

/* A boolean attribute, read strictly: 1/0 (as OpenMM writes them) or true/false; anything else is an
   error (OpenMM's getBoolProperty takes "maybe" as false and "2" as true). */
static bool strictBool(const SerializationNode& node, const string& name) {
    if (!node.hasProperty(name)) throw OpenMMException("NNPForce: the XML lacks the attribute '" + name + "'");
    const string text = node.getStringProperty(name);
    if (text == "1" || text == "true") return true;
    if (text == "0" || text == "false") return false;
    throw OpenMMException("NNPForce: the XML attribute " + name + "=\"" + text.substr(0, 40) +
                          "\" is not a boolean (0, 1, false or true)");
}

NNPForceProxy::NNPForceProxy() : SerializationProxy("NNPForce") {}

void NNPForceProxy::serialize(const void* object, SerializationNode& node) const {
    node.setIntProperty("version", 1);
    const NNPForce& force = *reinterpret_cast<const NNPForce*>(object);
    node.setIntProperty("forceGroup", force.getForceGroup());
    node.setStringProperty("name", force.getName());
    node.setBoolProperty("usesPeriodic", force.usesPeriodicBoundaryConditions());
    node.setIntProperty("ensembleMember", force.getEnsembleMember());
    node.setStringProperty("modelPath", force.getModelPath());
    node.setStringProperty("modelName", force.getModelName());
    node.setBoolProperty("modelEmbedded", force.getEmbedModelInXml());
    if (force.getEmbedModelInXml()) node.setStringProperty("modelData", toBase64(force.getModelData()));
    SerializationNode& atoms = node.createChildNode("Atoms");
    atoms.setIntProperty("count", force.getNumAtoms());
    for (int i = 0; i < force.getNumAtoms(); i++) {
        int particle, z, batch;
        force.getAtomParameters(i, particle, z, batch);
        atoms.createChildNode("Atom").setIntProperty("p", particle).setIntProperty("z", z).setIntProperty("b", batch);
    }
    // Written only when a batch is charged, so that files of neutral systems read in older versions.
    if (!force.getBatchCharges().empty()) {
        SerializationNode& charges = node.createChildNode("BatchCharges");
        for (const auto& entry : force.getBatchCharges())
            charges.createChildNode("Batch").setIntProperty("b", entry.first).setIntProperty("q", entry.second);
    }
}

void* NNPForceProxy::deserialize(const SerializationNode& node) const {
    int version = strictInt(node, "version");
    if (version != 1)
        throw OpenMMException("NNPForce: unsupported XML version " + std::to_string(version) + " (this plugin reads version 1)");
    NNPForce* force;
    if (strictBool(node, "modelEmbedded"))
        force = NNPForce::createFromModelData(fromBase64(node.getStringProperty("modelData")), node.getStringProperty("modelPath"));
    else
        force = new NNPForce(node.getStringProperty("modelPath"));
    try {
        force->setForceGroup(strictInt(node, "forceGroup"));
        force->setName(node.getStringProperty("name"));
        force->setUsesPeriodicBoundaryConditions(strictBool(node, "usesPeriodic"));
        force->setEnsembleMember(strictInt(node, "ensembleMember"));
        force->setEmbedModelInXml(strictBool(node, "modelEmbedded"));
        const SerializationNode& atoms = node.getChildNode("Atoms");
        for (const SerializationNode& atom : atoms.getChildren())
            force->addAtom(strictInt(atom, "p"), strictInt(atom, "z"), strictInt(atom, "b"));
        // Files written before the count was stored have none; with one, a truncated list is an error.
        if (atoms.hasProperty("count") && strictInt(atoms, "count") != force->getNumAtoms())
            throw OpenMMException("NNPForce: the XML announces " + atoms.getStringProperty("count") + " atoms but holds " +
                                  std::to_string(force->getNumAtoms()) + " (a truncated or edited file?)");
        for (const SerializationNode& child : node.getChildren())
            if (child.getName() == "BatchCharges")
                for (const SerializationNode& batch : child.getChildren())
                    force->setBatchCharge(strictInt(batch, "b"), strictInt(batch, "q"));
    } catch (...) {
        delete force;
        throw;
    }
    return force;
}
