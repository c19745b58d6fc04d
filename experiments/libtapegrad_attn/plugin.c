#define _GNU_SOURCE   /* realpath, dlopen flags */
#include "tg_attn_plugin.h"
#include "tg_file.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int check_elf(int fd, const char *name, char *err, size_t errlen) {
    Elf64_Ehdr h;
    ssize_t got = pread(fd, &h, sizeof h, 0);
    size_t n = got > 0 ? (size_t)got : 0;
    if (n < EI_NIDENT || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0)
        return tg_errf(err, errlen, "plugin %s: not a shared object (no ELF header; build it with cc -shared -fPIC)", name);
    Elf64_Ehdr self_h;
    FILE *f = fopen("/proc/self/exe", "rb");
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

/* The file's bytes into a sealed memory file, hashed on the way: what dlopen maps
 * is what the hash says. Returns the memory file's descriptor, or -1 (err). */
static int copy_sealed(int fd, const char *name, char hex[65], char *err, size_t errlen) {
    int mfd = memfd_create("tapegrad-plugin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0) return tg_errf(err, errlen, "plugin %s: memfd_create: %s", name, strerror(errno));
    tg_sha256 s;
    tg_sha256_init(&s);
    unsigned char buf[1 << 14];
    for (off_t at = 0;;) {
        ssize_t n = pread(fd, buf, sizeof buf, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            tg_errf(err, errlen, "plugin %s: read: %s", name, strerror(errno));
            close(mfd);
            return -1;
        }
        if (n == 0) break;
        tg_sha256_update(&s, buf, (size_t)n);
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(mfd, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                tg_errf(err, errlen, "plugin %s: copying it to memory: %s", name, strerror(errno));
                close(mfd);
                return -1;
            }
            w += k;
        }
        at += n;
    }
    unsigned char d[32];
    tg_sha256_final(&s, d);
    tg_sha256_hex(d, hex);
    fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    return mfd;
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

/* The descriptor into p->kernel; an ABI 1 declaration (tapegrad <= 0.12) refused, naming the version. */
static int read_descriptor(tg_attn_plugin *p, const char *file, char *err, size_t errlen) {
    char dname[160];
    snprintf(dname, sizeof dname, "tg_attn_plugin_%s", p->symbol);
    const tg_attn_kernel *desc = dlsym(p->handle, dname);
    const int *abi1 = dlsym(p->handle, "tg_attention_plugin_abi");
    if (desc) {
        /* the fields of ABI 2's first descriptor: size, abi, features, name, attend */
        const size_t least = offsetof(tg_attn_kernel, attend) + sizeof(tg_attend_fn);
        if (desc->abi != TG_ATTENTION_PLUGIN_ABI)
            return tg_errf(err, errlen, "plugin %s: its descriptor %s says plugin ABI %d; this program takes ABI %d: "
                           "rebuild it against this tapegrad", file, dname, desc->abi, TG_ATTENTION_PLUGIN_ABI);
        if (desc->size < least)
            return tg_errf(err, errlen, "plugin %s: its descriptor %s has size %zu, less than ABI %d's %zu: not made "
                           "with TG_ATTENTION_PLUGIN", file, dname, desc->size, TG_ATTENTION_PLUGIN_ABI, least);
        if (!desc->attend) return tg_errf(err, errlen, "plugin %s: its descriptor %s has no kernel (attend NULL)", file, dname);
        char why[300];
        if (tg_attn_declared_valid(desc, why, sizeof why))   /* what it declares, checked as every declaration */
            return tg_errf(err, errlen, "plugin %s: its descriptor %s declares %s", file, dname, why);
        p->abi = TG_ATTENTION_PLUGIN_ABI;
        p->kernel = (tg_attn_kernel){sizeof(tg_attn_kernel), desc->abi, desc->features, p->symbol, desc->attend, NULL, NULL,
                                     NULL, tg_attn_kernel_conventions(desc),   /* 0 from a descriptor before 0.17 */
                                     tg_attn_kernel_precision(desc)};          /* fp32 from one before 0.21 */
        return 0;
    }
    void *fn = dlsym(p->handle, p->symbol);
    if (abi1 && *abi1 == 1)   /* the adapter's path, refused since 0.20 (its last loader: 0.19) */
        return tg_errf(err, errlen, "plugin %s: declares plugin ABI 1 (a tg_attention_fn and TG_ATTENTION_PLUGIN_DECLARE, "
                       "tapegrad 0.12's), which tapegrad 0.20 no longer loads (0.19 was the last): make the kernel a "
                       "tg_attend_fn on tg_attn_args and export it with TG_ATTENTION_PLUGIN(%s, TG_ATTN_F_DV) "
                       "(docs/plugins.md)", file, p->symbol);
    if (abi1)
        return tg_errf(err, errlen, "plugin %s: declares plugin ABI %d (tg_attention_plugin_abi) and exports no "
                       "descriptor %s; this program takes ABI %d (TG_ATTENTION_PLUGIN)", file, *abi1, dname,
                       TG_ATTENTION_PLUGIN_ABI);
    return tg_errf(err, errlen, "plugin %s: no kernel descriptor %s (ABI %d: TG_ATTENTION_PLUGIN(%s, features) after "
                   "the kernel)%s; a plugin must say which ABI it was built for and what it supports", file, dname,
                   TG_ATTENTION_PLUGIN_ABI, p->symbol, fn ? ", though it has a symbol of that name" : "");
}

int tg_attn_plugin_open(tg_attn_plugin *p, const char *spec, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    char file[4096];
    if (tg_attn_plugin_spec(spec, file, sizeof file, p->symbol, sizeof p->symbol, err, errlen)) return -1;
    /* one open: every check, the hash and the load read this descriptor's file */
    char why[4200];
    int fd = tg_file_open_read(file, why, sizeof why);   /* the one regular-file rule (tg_file.h) */
    if (fd < 0 && errno == EINVAL) return tg_errf(err, errlen, "plugin %s", why);
    if (fd < 0) return tg_errf(err, errlen, "plugin %s: %s", file, strerror(errno));
    if (!realpath(file, p->path)) snprintf(p->path, sizeof p->path, "%s", file);   /* for the log only */
    if (check_elf(fd, file, err, errlen)) {
        close(fd);
        return -1;
    }
    int mfd = copy_sealed(fd, file, p->sha256, err, errlen);
    close(fd);
    if (mfd < 0) return -1;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", mfd);
    dlerror();
    p->handle = dlopen(self, RTLD_NOW | RTLD_LOCAL);
    close(mfd);   /* the mapping stays */
    if (!p->handle) {
        const char *e = dlerror();
        char why[600];
        snprintf(why, sizeof why, "%s", e ? e : "(no reason given)");
        /* dlopen names the memory file: the reader wants theirs */
        const char *tail = strstr(why, self);
        return tg_errf(err, errlen, "plugin %s: cannot be loaded: %s", file,
                       tail && tail[strlen(self)] == ':' ? tail + strlen(self) + 2 : why);
    }
    if (read_descriptor(p, file, err, errlen)) {
        tg_attn_plugin_close(p);
        return -1;
    }
    return 0;
}

void tg_attn_plugin_close(tg_attn_plugin *p) {
    if (p->handle) dlclose(p->handle);
    p->handle = NULL;
    p->kernel.attend = NULL;
    p->kernel.textbook = NULL;
}

const char *tg_attn_plugin_describe(const tg_attn_plugin *p, char *buf, size_t len) {
    char declared[600];
    snprintf(buf, len, "ABI %d: %s", p->abi, tg_attn_declared_str(&p->kernel, declared, sizeof declared));
    return buf;
}
