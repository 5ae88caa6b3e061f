/* A guest that changes qemu's memory map on one vCPU while another vCPU reads an MMIO page:
 * the access pattern that makes multi-threaded TCG route a read to the wrong device
 * (vm/src/machine/tcg_thread.rs, docs/hosts.md). Run as root in the guest by
 * ci/qemu-mmio-race.sh:
 *
 *   qemu-mmio-race TOGGLE_BDF READ_BDF SECONDS
 *
 * CPU 0 clears and sets the memory-decode bit of TOGGLE_BDF's PCI command register (each write
 * removes or adds that device's BARs: a new memory map in qemu, `pci_update_mappings`,
 * hw/pci/pci.c); CPU 1 reads READ_BDF's MSI-X pending-bit array, two loads per iteration, at
 * 0x800 of BAR 1 (virtio-pci's MSI-X BAR, `msix_init_exclusive_bar` in hw/pci/msix.c puts
 * the PBA in its upper half). Exits 0 when the guest is still running after SECONDS. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PBA_OFFSET 0x800
#define COMMAND 4
#define COMMAND_MEMORY 2

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) {
        perror("sched_setaffinity (the guest needs 2 online CPUs)");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: qemu-mmio-race TOGGLE_BDF READ_BDF SECONDS\n");
        return 2;
    }
    char path[256];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/resource1", argv[2]);
    int rfd = open(path, O_RDWR | O_SYNC);
    if (rfd < 0) {
        perror(path);
        return 1;
    }
    volatile uint32_t *page = mmap(0, 4096, PROT_READ, MAP_SHARED, rfd, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/config", argv[1]);
    int cfd = open(path, O_RDWR);
    uint16_t cmd;
    if (cfd < 0 || pread(cfd, &cmd, 2, COMMAND) != 2) {
        perror(path);
        return 1;
    }
    int seconds = atoi(argv[3]);
    pid_t reader = fork();
    if (reader == 0) {
        pin(1);
        for (;;) {
            (void)page[PBA_OFFSET / 4];
            (void)page[PBA_OFFSET / 4 + 1];
        }
    }
    pin(0);
    printf("qemu-mmio-race: toggling memory decode of %s (command %#x) while CPU 1 reads "
           "%s's MSI-X PBA, for %d s\n", argv[1], cmd, argv[2], seconds);
    fflush(stdout);
    uint16_t off = cmd & ~COMMAND_MEMORY, on = cmd | COMMAND_MEMORY;
    unsigned long toggles = 0;
    time_t end = time(0) + seconds;
    while (time(0) < end) {
        if (pwrite(cfd, &off, 2, COMMAND) != 2 || pwrite(cfd, &on, 2, COMMAND) != 2) {
            perror("write the command register");
            return 1;
        }
        toggles++;
    }
    pwrite(cfd, &cmd, 2, COMMAND);
    kill(reader, SIGKILL);
    waitpid(reader, 0, 0);
    printf("qemu-mmio-race: %lu toggles in %d s; qemu survived\n", toggles, seconds);
    return 0;
}
