// How glibc's malloc treats freed memory in the Strait executables.
#pragma once

namespace strait {

// Keeps freed memory in the process for reuse instead of handing it back to the kernel at once.
// glibc's defaults map every block of 128 KiB or more afresh and trim a heap as soon as 128 KiB at
// its top are free (raising both limits only as larger mapped blocks are freed), so a process that
// allocates and frees frames, chunks and link buffers of tens to hundreds of KiB many times a
// second pays page faults and TLB shootdowns for many of them. With the limits set to where
// glibc's own adjustment ends (blocks up to 32 MiB from the heap, trimming beyond 64 MiB free) the
// link emulators spend a third less CPU per step at `region` (docs/notes/wan-link-emulator.md,
// "What the emulators cost, and the malloc fix"). Call first thing in main(), before any thread
// starts.
void KeepFreedMemoryForReuse();

}  // namespace strait
