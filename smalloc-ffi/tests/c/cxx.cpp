// C++ under LD_PRELOAD: every operator new/delete form lands in smalloc,
// containers work, and allocation failure still throws std::bad_alloc
// (after calling the new-handler).
#include <dlfcn.h>

#include <cstring>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

static bool owned(const void *p) {
    static auto f = reinterpret_cast<bool (*)(const void *)>(dlsym(RTLD_DEFAULT, "smalloc_owns"));
    if (!f) {
        std::fprintf(stderr, "smalloc is not loaded\n");
        std::exit(2);
    }
    return f(p);
}

struct alignas(256) Wide {
    unsigned char bytes[256];
};

static int handler_calls;
static void handler() {
    // Give up on the second call: operator new must then throw.
    if (++handler_calls >= 2) std::set_new_handler(nullptr);
}

// Keeps the compiler from eliding a new/delete pair.
static void *volatile sink;

// Whether the global definition of `name` is smalloc's.
static bool from_smalloc(const char *name) {
    Dl_info info;
    void *f = dlsym(RTLD_DEFAULT, name);
    return f && dladdr(f, &info) && info.dli_fname && std::strstr(info.dli_fname, "libsmalloc");
}

int main() {
    const char *operators[] = {
        "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
        "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
        "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
        "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
        "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    };
    for (const char *op : operators) {
        if (!from_smalloc(op)) {
            std::fprintf(stderr, "%s does not resolve to smalloc\n", op);
            return 1;
        }
    }
    int *i = new int(42);
    CHECK(owned(i) && *i == 42);
    delete i;
    long *a = new long[1000];
    CHECK(owned(a));
    for (int k = 0; k < 1000; k++) a[k] = k;
    CHECK(a[999] == 999);
    delete[] a;
    int *n = new (std::nothrow) int(7);
    CHECK(n && owned(n) && *n == 7);
    delete n;
    char *na = new (std::nothrow) char[300];
    CHECK(na && owned(na));
    delete[] na;

    Wide *w = new Wide;
    CHECK(owned(w) && reinterpret_cast<uintptr_t>(w) % 256 == 0);
    delete w;
    Wide *wa = new Wide[10];
    CHECK(owned(wa) && reinterpret_cast<uintptr_t>(wa) % 256 == 0);
    delete[] wa;
    Wide *wn = new (std::nothrow) Wide;
    CHECK(wn && reinterpret_cast<uintptr_t>(wn) % 256 == 0);
    delete wn;
    for (std::size_t al = 1; al <= (1u << 20); al <<= 1) {
        void *p = ::operator new(100, std::align_val_t(al));
        CHECK(owned(p) && reinterpret_cast<uintptr_t>(p) % al == 0);
        ::operator delete(p, 100, std::align_val_t(al));
        p = ::operator new[](al, std::align_val_t(al), std::nothrow);
        CHECK(p && reinterpret_cast<uintptr_t>(p) % al == 0);
        ::operator delete[](p, std::align_val_t(al), std::nothrow);
    }
    void *sized = ::operator new(48);
    ::operator delete(sized, 48);
    sized = ::operator new[](48);
    ::operator delete[](sized, 48);

    std::vector<std::string> v;
    for (int k = 0; k < 100000; k++) v.push_back("item-" + std::to_string(k) + std::string(k % 50, 'x'));
    CHECK(owned(v.data()) && owned(v[99999].data()));
    std::size_t total = 0;
    for (auto &s : v) total += s.size();
    std::map<std::string, std::unique_ptr<std::vector<int>>> m;
    for (int k = 0; k < 20000; k++) m[v[k]] = std::make_unique<std::vector<int>>(k % 100, k);
    CHECK(m.size() == 20000 && (*m["item-1234" + std::string(1234 % 50, 'x')])[5] == 1234);
    std::string s;
    for (int k = 0; k < 100000; k++) s += static_cast<char>('a' + k % 26);
    CHECK(owned(s.data()) && s.size() == 100000 && s[27] == 'b');

    // Failure: the throwing forms call the new-handler, then throw.
    const std::size_t huge = std::size_t(1) << 62;
    std::set_new_handler(handler);
    bool caught = false;
    try {
        sink = ::operator new(huge);
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught && handler_calls == 2);
    caught = false;
    try {
        sink = ::operator new[](huge, std::align_val_t(64));
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);
    caught = false;
    try {
        sink = ::operator new(huge, std::align_val_t(4096));
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);
    caught = false;
    try {
        sink = ::operator new[](huge);
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);
    CHECK(::operator new(huge, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, std::nothrow) == nullptr);
    CHECK(::operator new(huge, std::align_val_t(64), std::nothrow) == nullptr);
    CHECK(::operator new[](huge, std::align_val_t(64), std::nothrow) == nullptr);

    std::printf("c++ ok: %zu strings, %zu bytes\n", v.size(), total);
    return 0;
}
