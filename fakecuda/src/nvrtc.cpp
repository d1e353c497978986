// Fake libnvrtc: "compiles" a CUDA source with the system C++ compiler and the emulation
// header (include/sluice_cuda_emu.h) into a shared object, cached by a hash of
// everything that decides its bytes. The "CUBIN" it returns is a small text image
// naming that object, which the fake cuModuleLoadData loads.
//
// Steps: (1) the two inline-PTX f16 conversions of the kernels are rewritten into calls
// of the header's software conversions (any other inline PTX is a compile error);
// (2) the preprocessor lists the __global__ functions; (3) g++ -O1 -shared builds the
// source with a kernel table appended. Compile errors come back through the program
// log, naming the source as `<name>.cu`.
//
// Environment: SLUICE_FAKE_CUDA_CACHE (default: <lib dir>/../cache), SLUICE_FAKE_CXX
// (default g++). Active only with SLUICE_FAKE_CUDA=1.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fake_internal.h"

namespace {

enum : int {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
};

struct Program {
    std::string source, name, log, image;
    bool compiled = false;
};

std::string lib_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&lib_dir), &info) && info.dli_fname) {
        std::string p = info.dli_fname;
        p = p.find('/') == std::string::npos ? "." : p.substr(0, p.rfind('/'));
        char real[4096];
        if (realpath(p.c_str(), real)) return real;
        return p;
    }
    return ".";
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// Two FNV-1a 64-bit hashes with different offsets: a 128-bit content key.
std::string content_key(const std::vector<std::string>& parts) {
    unsigned long long a = 1469598103934665603ull, b = 0x84222325cbf29ce4ull;
    for (const std::string& p : parts) {
        for (int round = 0; round < 2; ++round) {
            const std::string& s = round == 0 ? std::to_string(p.size()) : p;
            for (unsigned char c : s) {
                a = (a ^ c) * 1099511628211ull;
                b = (b ^ (c + 0x5bu)) * 1099511628211ull;
            }
        }
    }
    char buf[40];
    snprintf(buf, sizeof buf, "%016llx%016llx", a, b);
    return buf;
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Rewrites `asm("cvt.f32.f16 %0, %1;" : "=f"(X) : "h"(Y));` and
// `asm("cvt.rn.f16.f32 %0, %1;" : "=h"(X) : "f"(Y));`; any other asm is an error.
bool rewrite_ptx(std::string& src, std::string& log) {
    static const std::regex asm_re(
        R"re(asm\s*(volatile\s*)?\(\s*"([^"]*)"\s*:\s*"=(\w)"\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)\s*:\s*"(\w)"\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)\s*\)\s*;)re");
    std::string out;
    std::smatch m;
    std::string rest = src;
    while (std::regex_search(rest, m, asm_re)) {
        out += m.prefix();
        std::string tmpl = m[2], dst = m[4], in = m[6];
        if (tmpl == "cvt.f32.f16 %0, %1;") {
            out += "(" + dst + ") = ::sluice_emu::half_to_float(" + in + ");";
        } else if (tmpl == "cvt.rn.f16.f32 %0, %1;") {
            out += "(" + dst + ") = ::sluice_emu::float_to_half(" + in + ");";
        } else {
            log += "fake NVRTC: inline PTX \"" + tmpl + "\" is not emulated\n";
            return false;
        }
        rest = m.suffix();
    }
    out += rest;
    if (std::regex_search(out, std::regex(R"(\basm\s*(volatile\s*)?\()"))) {
        log += "fake NVRTC: an inline asm statement has a form the emulator does not translate\n";
        return false;
    }
    src = out;
    return true;
}

int run(const std::string& cmd, const std::string& log_path, std::string& log) {
    int rc = system((cmd + " 2>" + quote(log_path)).c_str());
    log += read_file(log_path);
    unlink(log_path.c_str());
    return rc;
}

int compile(Program& p, const std::vector<std::string>& options) {
    std::string src = p.source;
    if (!rewrite_ptx(src, p.log)) return NVRTC_ERROR_COMPILATION;
    const std::string dir = lib_dir();
    const std::string header = dir + "/../include/sluice_cuda_emu.h";
    const std::string header_text = read_file(header) + read_file(dir + "/../include/sluice_cuda_emu_abi.h");
    if (header_text.empty()) {
        p.log += "fake NVRTC: cannot read " + header + "\n";
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    const char* cxx_env = getenv("SLUICE_FAKE_CXX");
    const std::string cxx = cxx_env && *cxx_env ? cxx_env : "g++";
    const std::string flags = "-std=c++17 -O1 -fPIC -shared -fvisibility=hidden -w";
    std::vector<std::string> parts = {"sluice-fake-nvrtc-v2", src, header_text, cxx, flags, p.name};
    for (auto& o : options) parts.push_back(o);
    const std::string key = content_key(parts);
    const char* cache_env = getenv("SLUICE_FAKE_CUDA_CACHE");
    const std::string cache = cache_env && *cache_env ? cache_env : dir + "/../cache";
    mkdir(cache.c_str(), 0755);
    const std::string so = cache + "/" + key + ".so";
    struct stat sb;
    if (stat(so.c_str(), &sb) == 0 && sb.st_size > 0) {
        p.image = std::string("SLUICE-FAKE-CUBIN-1\n") + so + "\n";
        return NVRTC_SUCCESS;
    }
    // Unique per process and call: two threads may compile the same source at once.
    static std::atomic<unsigned> calls{0};
    const std::string tmp = cache + "/" + key + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(calls++);
    const std::string unit = tmp + ".cpp", pre = tmp + ".ii", log_path = tmp + ".log";
    {
        std::ofstream f(unit, std::ios::binary);
        f << "#line 1 \"" << p.name << "\"\n" << src << "\n";
    }
    const std::string inc = "-include " + quote(header);
    if (run(cxx + " -std=c++17 -E -DSLUICE_EMU_SCAN " + inc + " -x c++ " + quote(unit) + " -o " + quote(pre), log_path,
            p.log) != 0) {
        unlink(unit.c_str());
        unlink(pre.c_str());
        return NVRTC_ERROR_COMPILATION;
    }
    const std::string text = read_file(pre);
    unlink(pre.c_str());
    // `__global__ void __launch_bounds__(N[, M]) name(`: the bound (0 if none) goes into the table.
    static const std::regex kernel_re(
        R"(SLUICE_KERNEL_MARK\s+void\s+(?:SLUICE_LAUNCH_BOUNDS\s*\(\s*([^,)]+)[^)]*\)\s*)?(\w+)\s*\()");
    std::vector<std::pair<std::string, std::string>> kernels;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kernel_re); it != std::sregex_iterator(); ++it)
        kernels.emplace_back((*it)[2], (*it)[1].matched ? (*it)[1].str() : "0");
    {
        std::ofstream f(unit, std::ios::binary | std::ios::app);
        f << "\nstatic const ::sluice_emu::KernelDesc sluice_emu_table[] = {\n";
        for (auto& [k, bound] : kernels) f << "    SLUICE_EMU_REGISTER(" << k << ", " << bound << "),\n";
        if (kernels.empty()) f << "    {nullptr, nullptr, 0, nullptr, nullptr, 0},\n";
        f << "};\nextern \"C\" __attribute__((visibility(\"default\"))) const ::sluice_emu::KernelDesc* "
             "sluice_emu_kernels(size_t* n) { *n = "
          << kernels.size() << "; return sluice_emu_table; }\n";
    }
    const int rc = run(cxx + " " + flags + " " + inc + " -x c++ " + quote(unit) + " -o " + quote(tmp + ".so"),
                       log_path, p.log);
    unlink(unit.c_str());
    if (rc != 0) {
        unlink((tmp + ".so").c_str());
        return NVRTC_ERROR_COMPILATION;
    }
    rename((tmp + ".so").c_str(), so.c_str());
    p.image = std::string("SLUICE-FAKE-CUBIN-1\n") + so + "\n";
    return NVRTC_SUCCESS;
}

}  // namespace

FAKE_API int nvrtcVersion(int* major, int* minor) {
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

FAKE_API const char* nvrtcGetErrorString(int r) {
    switch (r) {
        case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
        case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
        case NVRTC_ERROR_PROGRAM_CREATION_FAILURE: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
        case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
        case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
        case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
        case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
        default: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
}

FAKE_API int nvrtcCreateProgram(Program** out, const char* src, const char* name, int num_headers,
                                const char* const*, const char* const*) {
    if (!out || !src) return NVRTC_ERROR_INVALID_INPUT;
    if (num_headers != 0) return NVRTC_ERROR_INVALID_INPUT;  // the kernels need no headers
    Program* p = new Program();
    p->source = src;
    p->name = name ? name : "default_program";
    *out = p;
    return NVRTC_SUCCESS;
}

FAKE_API int nvrtcDestroyProgram(Program** p) {
    if (!p || !*p) return NVRTC_ERROR_INVALID_PROGRAM;
    delete *p;
    *p = nullptr;
    return NVRTC_SUCCESS;
}

FAKE_API int nvrtcCompileProgram(Program* p, int n, const char* const* options) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!fake_enabled()) {
        p->log = "fake NVRTC: inactive (set SLUICE_FAKE_CUDA=1)";
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    std::vector<std::string> opts;
    for (int i = 0; i < n; ++i) {
        std::string o = options[i];
        if (o.rfind("--gpu-architecture=", 0) != 0 && o.rfind("-arch=", 0) != 0 && o != "--std=c++17" &&
            o != "-std=c++17") {
            p->log = "fake NVRTC: option " + o + " is not emulated";
            return NVRTC_ERROR_INVALID_OPTION;
        }
        opts.push_back(o);
    }
    p->log.clear();
    int r = compile(*p, opts);
    p->compiled = r == NVRTC_SUCCESS;
    return r;
}

FAKE_API int nvrtcGetProgramLogSize(Program* p, size_t* n) {
    if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
    *n = p->log.size() + 1;
    return NVRTC_SUCCESS;
}

FAKE_API int nvrtcGetProgramLog(Program* p, char* out) {
    if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, p->log.c_str(), p->log.size() + 1);
    return NVRTC_SUCCESS;
}

FAKE_API int nvrtcGetCUBINSize(Program* p, size_t* n) {
    if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
    if (!p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
    *n = p->image.size() + 1;
    return NVRTC_SUCCESS;
}

FAKE_API int nvrtcGetCUBIN(Program* p, char* out) {
    if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
    if (!p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(out, p->image.c_str(), p->image.size() + 1);
    return NVRTC_SUCCESS;
}

// The image doubles as "PTX" for callers that load PTX.
FAKE_API int nvrtcGetPTXSize(Program* p, size_t* n) { return nvrtcGetCUBINSize(p, n); }
FAKE_API int nvrtcGetPTX(Program* p, char* out) { return nvrtcGetCUBIN(p, out); }

// Called by the generated stubs for every NVRTC entry point the fake does not emulate.
FAKE_API int sluice_fake_nvrtc_unsupported(const char* name) {
    fprintf(stderr, "fake libnvrtc: %s is not emulated\n", name);
    return NVRTC_ERROR_INTERNAL_ERROR;
}
