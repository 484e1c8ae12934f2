// The one FIFO (src/lib/fifo.ts): order kept across its compactions.
import { describe, expect, it } from "vitest";
import { Fifo } from "../../../src/lib/fifo.js";

describe("Fifo", () => {
  it("hands entries out in order, also across compactions", () => {
    const q = new Fifo<number>();
    let next = 0;
    let expected = 0;
    for (let round = 0; round < 50; round++) {
      for (let i = 0; i < 300; i++) q.push(next++);
      for (let i = 0; i < 200; i++) expect(q.shift()).toBe(expected++);
      expect(q.size).toBe(next - expected);
    }
    while (q.size > 0) expect(q.shift()).toBe(expected++);
    expect(q.shift()).toBeUndefined();
    expect(expected).toBe(next);
  });

  it("clear() returns what was left, oldest first", () => {
    const q = new Fifo<string>();
    for (const s of ["a", "b", "c"]) q.push(s);
    q.shift();
    expect(q.clear()).toEqual(["b", "c"]);
    expect(q.size).toBe(0);
    expect(q.shift()).toBeUndefined();
  });
});
