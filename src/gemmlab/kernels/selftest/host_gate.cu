// Not a GEMM: the benchmark's gate (bench/timing.py HostGate). One thread holds the stream until the
// host has written a ticket at least `ticket` into `flag` -- page-locked host memory mapped into the
// device's address space -- so everything queued behind the gate (the start event, the launches to
// time, the end event) is already queued when the GPU reaches it, however slow the host is. Past
// `limit` clock cycles it gives up and sets *timed_out: a host that waits on the GPU inside the
// gated section would otherwise hang; the benchmark discards such a round instead.
// (The 8-byte arguments come first: no padding for the launcher to get right.)
__global__ void host_gate(const volatile unsigned* flag, unsigned* timed_out, long long limit, unsigned ticket) {
    const long long t0 = clock64();
    while (*flag < ticket) {
        if (clock64() - t0 > limit) {
            *timed_out = 1u;
            return;
        }
        __nanosleep(500);
    }
}
