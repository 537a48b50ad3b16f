/* C side of the thread-local-state probe (see run.sh and docs/tls.md).
 *
 * Built once per TLS model: PLACE is exe, dl (dlopened) or pre (preloaded),
 * SCHEME names the model the build was given with -ftls-model /
 * -mtls-dialect. Each build exports tp_<PLACE>_c_<SCHEME>_{read,rw}(n),
 * loops calling a never-inlined one-access function n times. With
 * -DWITH_EXTRA it also exports tp_<PLACE>_c_pth_{read,rw}(n), a plain
 * pthread_getspecific / pthread_setspecific pair on a key made at load time,
 * and tp_<PLACE>_c_base_{read,rw}(n), the same loops on an ordinary global
 * (call and loop overhead only).
 */
#include <pthread.h>
#include <stdint.h>

#define CAT5(a, b, c, d, e) a##b##c##d##e
#define NAME5(a, b, c, d, e) CAT5(a, b, c, d, e)
#define EXPORT(scheme, op) NAME5(tp_, PLACE, _c_, scheme, op)
#define WORD NAME5(tp_, PLACE, _c_, SCHEME, _word)

/* Non-static and default visibility, so a shared library built with
 * -ftls-model=global-dynamic really has to ask __tls_get_addr. */
__thread uintptr_t WORD;

#define BARRIER() __asm__ volatile("" ::: "memory")

__attribute__((noinline, noclone)) static uintptr_t word_read(void) {
    return WORD;
}

__attribute__((noinline, noclone)) static uintptr_t word_rw(void) {
    uintptr_t v = WORD;
    WORD = v + 1;
    return v;
}

uint64_t EXPORT(SCHEME, _read)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += word_read();
    }
    return sum;
}

uint64_t EXPORT(SCHEME, _rw)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += word_rw();
    }
    return sum;
}

#ifdef WITH_EXTRA
static pthread_key_t key;
static uintptr_t plain;

__attribute__((constructor)) static void make_key(void) {
    pthread_key_create(&key, 0);
}

__attribute__((noinline, noclone)) static uintptr_t pth_read(void) {
    return (uintptr_t)pthread_getspecific(key);
}

__attribute__((noinline, noclone)) static uintptr_t pth_rw(void) {
    uintptr_t v = (uintptr_t)pthread_getspecific(key);
    pthread_setspecific(key, (void *)(v + 1));
    return v;
}

__attribute__((noinline, noclone)) static uintptr_t base_read(void) {
    return plain;
}

__attribute__((noinline, noclone)) static uintptr_t base_rw(void) {
    uintptr_t v = plain;
    plain = v + 1;
    return v;
}

uint64_t EXPORT(base, _read)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += base_read();
    }
    return sum;
}

uint64_t EXPORT(base, _rw)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += base_rw();
    }
    return sum;
}

uint64_t EXPORT(pth, _read)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += pth_read();
    }
    return sum;
}

uint64_t EXPORT(pth, _rw)(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        BARRIER();
        sum += pth_rw();
    }
    return sum;
}
#endif
