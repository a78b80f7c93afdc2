/* A CUDA program without CUDA's headers or toolkit: loads libcuda.so.1 by soname (as every CUDA
   application does, through the dynamic loader), lists the GPUs, and on GPU 0 runs a kernel
   given as PTX text (JIT-compiled by the driver) that adds 1 to each of 1024 floats, then checks
   the result. Prints `cuda-smoke: OK ...` on success, else the failing call and the driver's
   error name; exits 0 only on success. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

static const char PTX[] =
    ".version 6.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry add1(.param .u64 p, .param .u32 n) {\n"
    "  .reg .pred %p; .reg .b32 %r<5>; .reg .b64 %rd<4>; .reg .f32 %f<3>;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r2, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p, %r2, %r1; @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r2, 4; add.s64 %rd2, %rd2, %rd3;\n"
    "  ld.global.f32 %f1, [%rd2]; add.f32 %f2, %f1, 0f3F800000; st.global.f32 [%rd2], %f2;\n"
    "DONE:\n  ret;\n}\n";

static void *cuda;
static CUresult (*error_name)(CUresult, const char **);

static void *sym(const char *name) {
    void *f = dlsym(cuda, name);
    if (!f) { printf("cuda-smoke: libcuda.so.1 has no %s\n", name); }
    return f;
}

static int check(CUresult r, const char *call) {
    if (r == 0) return 0;
    const char *name = "?";
    if (error_name) error_name(r, &name);
    printf("cuda-smoke: %s failed: %d %s\n", call, r, name);
    return 1;
}

int main(void) {
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { printf("cuda-smoke: load failed: %s\n", dlerror()); return 2; }
    CUresult (*init)(unsigned) = sym("cuInit");
    CUresult (*count)(int *) = sym("cuDeviceGetCount");
    CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
    CUresult (*get_name)(char *, int, CUdevice) = sym("cuDeviceGetName");
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate_v2");
    CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
    CUresult (*function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
    CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
    CUresult (*to_device)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
    CUresult (*to_host)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, void *, void **, void **) = sym("cuLaunchKernel");
    CUresult (*sync)(void) = sym("cuCtxSynchronize");
    error_name = sym("cuGetErrorName");
    if (!init || !count || !get || !get_name || !ctx_create || !load || !function || !alloc ||
        !to_device || !to_host || !launch || !sync || !error_name)
        return 3;
    if (check(init(0), "cuInit")) return 1;
    int n = 0;
    if (check(count(&n), "cuDeviceGetCount")) return 1;
    for (int i = 0; i < n; i++) {
        CUdevice d;
        char name[256] = "";
        if (check(get(&d, i), "cuDeviceGet") || check(get_name(name, sizeof name, d), "cuDeviceGetName")) return 1;
        printf("cuda-smoke: device %d: %s\n", i, name);
    }
    if (n == 0) { printf("cuda-smoke: no device\n"); return 1; }
    CUdevice d;
    CUcontext ctx;
    CUmodule mod;
    CUfunction add1;
    CUdeviceptr buf;
    float host[1024];
    unsigned len = 1024;
    for (unsigned i = 0; i < len; i++) host[i] = (float)i;
    if (check(get(&d, 0), "cuDeviceGet") || check(ctx_create(&ctx, 0, d), "cuCtxCreate") ||
        check(load(&mod, PTX), "cuModuleLoadData") || check(function(&add1, mod, "add1"), "cuModuleGetFunction") ||
        check(alloc(&buf, sizeof host), "cuMemAlloc") || check(to_device(buf, host, sizeof host), "cuMemcpyHtoD"))
        return 1;
    void *args[] = {&buf, &len};
    if (check(launch(add1, len / 256, 1, 1, 256, 1, 1, 0, 0, args, 0), "cuLaunchKernel") ||
        check(sync(), "cuCtxSynchronize") || check(to_host(host, buf, sizeof host), "cuMemcpyDtoH"))
        return 1;
    for (unsigned i = 0; i < len; i++) {
        if (host[i] != (float)i + 1.0f) { printf("cuda-smoke: wrong result at %u: %f\n", i, host[i]); return 1; }
    }
    printf("cuda-smoke: OK, %d device(s), a kernel ran on device 0\n", n);
    return 0;
}
