/* componentize-py's libc++abi.so is built without C++ exceptions: it has no __cxa_throw.
 * numpy's C++ (pocketfft, unique) is compiled with -fexceptions for wasm32 without the
 * exception-handling proposal, so its catch blocks are gone and a throw ends up here:
 * the instance traps (the run fails) instead of raising a Python exception. */
#include <stdlib.h>
__attribute__((visibility("hidden"))) void *__cxa_allocate_exception(size_t size) {
    return malloc(size);
}
__attribute__((visibility("hidden"), noreturn)) void __cxa_throw(void *e, void *t, void (*d)(void *)) {
    (void)e; (void)t; (void)d;
    abort();
}
