// The one FIFO of the code base: the work queue's lanes (src/runtime/workqueue.ts) and the
// service client's rate-limit waiters (src/service/rate-limit.ts), where thousands of entries
// can wait at a cold start. Neutral library: imports nothing from src/.
//
// An array plus a head index, compacted lazily: O(1) push and shift without Array.shift's
// copying. Hand-written rather than denque (a ring buffer with the same O(1) operations): these
// thirty lines are the whole of it, and the two hottest queues of the operator do not need a
// dependency for them.

export class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(v: T): void {
    this.items.push(v);
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const v = this.items[this.head];
    this.items[this.head] = undefined; // let the GC have it
    this.head++;
    if (this.head >= this.items.length) {
      // Empty: start again from a fresh array so that it does not grow forever.
      this.items = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return v;
  }

  /** Removes every entry and returns them, oldest first. */
  clear(): T[] {
    const rest = this.items.slice(this.head) as T[];
    this.items = [];
    this.head = 0;
    return rest;
  }
}
