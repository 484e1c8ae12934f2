// A min-heap of (expiresAt, id) so that finding expired VMs costs O(expired · log n) instead
// of a scan of every VM on each request. Renewals push a new entry rather than moving the old
// one; stale entries are recognised (and skipped) by the caller when they surface.

interface Entry {
  at: number;
  id: string;
}

export class ExpiryHeap {
  private readonly heap: Entry[] = [];

  get size(): number {
    return this.heap.length;
  }

  push(at: number, id: string): void {
    const h = this.heap;
    h.push({ at, id });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = h[parent]!;
      const c = h[i]!;
      if (p.at <= c.at) break;
      h[parent] = c;
      h[i] = p;
      i = parent;
    }
  }

  /** Pop every entry due at or before `now`. */
  popDue(now: number): Entry[] {
    const due: Entry[] = [];
    while (this.heap.length > 0 && this.heap[0]!.at <= now) due.push(this.pop());
    return due;
  }

  clear(): void {
    this.heap.length = 0;
  }

  private pop(): Entry {
    const h = this.heap;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let min = i;
        if (l < h.length && h[l]!.at < h[min]!.at) min = l;
        if (r < h.length && h[r]!.at < h[min]!.at) min = r;
        if (min === i) break;
        const tmp = h[i]!;
        h[i] = h[min]!;
        h[min] = tmp;
        i = min;
      }
    }
    return top;
  }
}
