/* prof_syms: the loaded objects and their function symbols, for the encoder (prof_int.h). */
#include "prof/prof_int.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void build_id_hex(const struct dl_phdr_info *info, char out[41])
{
    out[0] = '\0';
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t nsz = (nh->n_namesz + 3u) & ~3u, dsz = (nh->n_descsz + 3u) & ~3u;
            const uint8_t *name = p + sizeof(*nh), *desc = name + nsz;
            if (desc + dsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t n = nh->n_descsz < 20 ? nh->n_descsz : 20;
                for (size_t k = 0; k < n; k++)
                    snprintf(out + 2 * k, 3, "%02x", desc[k]);
                return;
            }
            p = desc + dsz;
        }
    }
}

static int on_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    kv_prof_objs *o = arg;
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        kv_prof_obj *v = realloc(o->v, (o->n + 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        o->v = v;
        kv_prof_obj *ob = &v[o->n];
        memset(ob, 0, sizeof(*ob));
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        ob->lo = start & ~(uintptr_t)(page - 1);
        ob->hi = start + ph->p_memsz;
        ob->file_offset = ph->p_offset & ~(uint64_t)(page - 1);
        ob->bias = info->dlpi_addr;
        const char *name = info->dlpi_name;
        char exe[4096];
        if (!name || !name[0]) { /* the main program */
            ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
            exe[k > 0 ? k : 0] = '\0';
            name = exe;
        }
        ob->path = strdup(name);
        if (!ob->path)
            return -ENOMEM;
        build_id_hex(info, ob->build_id);
        o->n++;
    }
    return 0;
}

int kv_prof__objs_load(kv_prof_objs *o)
{
    memset(o, 0, sizeof(*o));
    int rc = dl_iterate_phdr(on_object, o);
    if (rc != 0) {
        kv_prof__objs_free(o);
        return -ENOMEM;
    }
    return 0;
}

kv_prof_obj *kv_prof__obj_find(kv_prof_objs *o, uintptr_t pc)
{
    for (size_t i = 0; i < o->n; i++)
        if (pc >= o->v[i].lo && pc < o->v[i].hi)
            return &o->v[i];
    return NULL;
}

static int sym_cmp(const void *a, const void *b)
{
    const kv_prof_sym *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The section headers of the mapped file, bounds-checked; NULL if it is not a usable ELF64. */
static const ElfW(Shdr) * sections(const uint8_t *m, size_t len, size_t *n)
{
    if (len < sizeof(ElfW(Ehdr)) || memcmp(m, ELFMAG, SELFMAG) != 0 || m[EI_CLASS] != ELFCLASS64)
        return NULL;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)m;
    if (eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff == 0 || eh->e_shoff > len ||
        (len - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
        return NULL;
    *n = eh->e_shnum;
    return (const ElfW(Shdr) *)(m + eh->e_shoff);
}

/* Reads the function symbols of one table (SHT_SYMTAB or SHT_DYNSYM); 0 if there is none. */
static int read_table(kv_prof_obj *ob, const uint8_t *m, size_t len, uint32_t type)
{
    size_t nsec;
    const ElfW(Shdr) *sh = sections(m, len, &nsec);
    if (!sh)
        return 0;
    for (size_t i = 0; i < nsec; i++) {
        if (sh[i].sh_type != type || sh[i].sh_link >= nsec || sh[i].sh_entsize != sizeof(ElfW(Sym)))
            continue;
        const ElfW(Shdr) *st = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset || st->sh_offset > len ||
            st->sh_size > len - st->sh_offset || st->sh_size == 0)
            continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(m + sh[i].sh_offset);
        size_t nsym = sh[i].sh_size / sizeof(ElfW(Sym));
        const char *strs = (const char *)(m + st->sh_offset);
        if (strs[st->sh_size - 1] != '\0')
            continue;
        kv_prof_sym *v = malloc((nsym ? nsym : 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        size_t k = 0;
        for (size_t j = 0; j < nsym; j++) {
            int t = ELF64_ST_TYPE(sym[j].st_info);
            if ((t != STT_FUNC && t != STT_GNU_IFUNC) || sym[j].st_shndx == SHN_UNDEF ||
                sym[j].st_value == 0 || sym[j].st_name >= st->sh_size)
                continue;
            v[k].lo = ob->bias + sym[j].st_value;
            v[k].hi = v[k].lo + (sym[j].st_size ? sym[j].st_size : 1);
            v[k].name = strs + sym[j].st_name;
            k++;
        }
        qsort(v, k, sizeof(*v), sym_cmp);
        ob->syms = v;
        ob->n_syms = k;
        return 1;
    }
    return 0;
}

static int load_syms(kv_prof_obj *ob)
{
    ob->loaded = 1;
    if (!ob->path[0])
        return 0;
    int fd = open(ob->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* not symbolized: the profile keeps the address and the mapping */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        close(fd);
        return 0;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    ob->map = m;
    ob->map_len = (size_t)sb.st_size;
    int rc = read_table(ob, m, ob->map_len, SHT_SYMTAB);
    if (rc == 0)
        rc = read_table(ob, m, ob->map_len, SHT_DYNSYM);
    return rc < 0 ? rc : 0;
}

const char *kv_prof__sym_find(kv_prof_obj *ob, uintptr_t pc)
{
    if (!ob->loaded && load_syms(ob) != 0)
        return NULL;
    size_t lo = 0, hi = ob->n_syms; /* the last symbol starting at or below pc */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ob->syms[mid].lo <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* aliases share an address: any one covering pc names it */
    for (size_t i = lo; i-- > 0;) {
        if (pc < ob->syms[i].hi)
            return ob->syms[i].name;
        if (i + 8 < lo) /* nested or overlapping symbols are rare; do not scan far back */
            break;
    }
    return NULL;
}

void kv_prof__objs_free(kv_prof_objs *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->v[i].path);
        free(o->v[i].syms);
        if (o->v[i].map)
            munmap(o->v[i].map, o->v[i].map_len);
    }
    free(o->v);
    memset(o, 0, sizeof(*o));
}
