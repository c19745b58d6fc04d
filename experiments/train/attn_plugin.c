#define _GNU_SOURCE   /* realpath, dlopen flags */
#include "tg_attn_plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tg_sha256.h"

static int is_ident(const char *s) {
    if (!*s || (*s >= '0' && *s <= '9')) return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return 0;
    return 1;
}

static const char *machine_name(unsigned m) {
    switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_386: return "i386";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_RISCV: return "riscv";
    case EM_PPC64: return "ppc64";
    case EM_S390: return "s390";
    default: return NULL;
    }
}

/* The ELF header says whether dlopen can take the file, in words dlopen does not use. */
static int check_elf(const char *path, const char *name, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return tg_errf(err, errlen, "plugin %s: %s", name, strerror(errno));
    Elf64_Ehdr h;
    size_t n = fread(&h, 1, sizeof h, f);
    fclose(f);
    if (n < EI_NIDENT || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0)
        return tg_errf(err, errlen, "plugin %s: not a shared object (no ELF header; build it with cc -shared -fPIC)", name);
    Elf64_Ehdr self_h;
    f = fopen("/proc/self/exe", "rb");
    int have_self = f && fread(&self_h, 1, sizeof self_h, f) == sizeof self_h;
    if (f) fclose(f);
    unsigned self_machine = have_self ? self_h.e_machine : EM_X86_64;
    int self_class = have_self ? self_h.e_ident[EI_CLASS] : ELFCLASS64;
    if (n < sizeof(Elf32_Ehdr)) return tg_errf(err, errlen, "plugin %s: truncated ELF header", name);
    /* e_type and e_machine sit at the same offsets in 32- and 64-bit headers */
    unsigned machine = h.e_machine, type = h.e_type;
    if (h.e_ident[EI_CLASS] != self_class || machine != self_machine) {
        const char *a = machine_name(machine), *b = machine_name(self_machine);
        char an[32], bn[32];
        if (!a) snprintf(an, sizeof an, "ELF machine %u", machine), a = an;
        if (!b) snprintf(bn, sizeof bn, "ELF machine %u", self_machine), b = bn;
        return tg_errf(err, errlen, "plugin %s: built for %s (%d-bit), this program is %s (%d-bit)", name, a,
                       h.e_ident[EI_CLASS] == ELFCLASS64 ? 64 : 32, b, self_class == ELFCLASS64 ? 64 : 32);
    }
    if (type != ET_DYN)
        return tg_errf(err, errlen, "plugin %s: an ELF %s, not a shared object (build it with cc -shared -fPIC)", name,
                       type == ET_EXEC ? "executable" : type == ET_REL ? "object file (.o)" : "file of another type");
    return 0;
}

int tg_attn_plugin_spec(const char *spec, char *file, size_t flen, char *symbol, size_t slen, char *err,
                        size_t errlen) {
    const char *colon = strrchr(spec, ':');
    const int has_symbol = colon && is_ident(colon + 1);
    const size_t n = has_symbol ? (size_t)(colon - spec) : strlen(spec);
    if (n >= flen) return tg_errf(err, errlen, "plugin path too long");
    if (has_symbol && strlen(colon + 1) >= slen) return tg_errf(err, errlen, "plugin symbol name too long");
    memcpy(file, spec, n);
    file[n] = 0;
    snprintf(symbol, slen, "%s", has_symbol ? colon + 1 : "attention");
    if (!file[0]) return tg_errf(err, errlen, "plugin: no file named (plugin:FILE.so[:SYMBOL])");
    return 0;
}

int tg_attn_plugin_open(tg_attn_plugin *p, const char *spec, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    char file[4096];
    if (tg_attn_plugin_spec(spec, file, sizeof file, p->symbol, sizeof p->symbol, err, errlen)) return -1;
    struct stat st;
    if (stat(file, &st) != 0) return tg_errf(err, errlen, "plugin %s: %s", file, strerror(errno));
    if (!S_ISREG(st.st_mode)) return tg_errf(err, errlen, "plugin %s: not a regular file", file);
    /* dlopen searches the library path for a name without '/': always give it the file itself */
    if (!realpath(file, p->path)) return tg_errf(err, errlen, "plugin %s: %s", file, strerror(errno));
    if (check_elf(p->path, file, err, errlen)) return -1;
    if (tg_sha256_file(p->path, p->sha256, err, errlen)) return -1;
    dlerror();
    p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        const char *e = dlerror();
        return tg_errf(err, errlen, "plugin %s: cannot be loaded: %s", file, e ? e : "(no reason given)");
    }
    const int *abi = dlsym(p->handle, "tg_attention_plugin_abi");
    if (abi && *abi != TG_ATTENTION_PLUGIN_ABI) {
        tg_attn_plugin_close(p);
        return tg_errf(err, errlen, "plugin %s: built for plugin ABI %d, this program has ABI %d (rebuild it against "
                       "this tapegrad)", file, *abi, TG_ATTENTION_PLUGIN_ABI);
    }
    dlerror();
    void *sym = dlsym(p->handle, p->symbol);
    if (!sym) {
        tg_attn_plugin_close(p);
        return tg_errf(err, errlen, "plugin %s: no symbol '%s' (name another with FILE:SYMBOL; nm -D --defined-only "
                       "FILE lists them)", file, p->symbol);
    }
    /* POSIX: a data pointer from dlsym converts to a function pointer */
    memcpy(&p->fn, &sym, sizeof p->fn);
    return 0;
}

void tg_attn_plugin_close(tg_attn_plugin *p) {
    if (p->handle) dlclose(p->handle);
    p->handle = NULL;
    p->fn = NULL;
}
