// Following a step's output file as it grows (`logs`), against the emulator's agentd: the files
// are the step's own (written on the VM's disk here as the step's script would), read through
// the service's forwarding route with the published file calls (files/info, files/download).
import { appendFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepFollower } from "../../../src/runs/follow.js";
import { stepDir, stepPath } from "../../../src/runs/script.js";
import type { AgentdClient } from "../../../src/service/agentd.js";
import { agentdOf, start, type Harness } from "../service/helpers.js";

const SECRET = "s3cret-value-for-follow";
let h: Harness;
let vm: AgentdClient;
let workspace: string;
let vmId: string;

beforeAll(async () => {
  h = await start();
  vmId = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
  workspace = h.emu.runtimes.get(vmId)!.workspace;
  vm = agentdOf(h, vmId);
});
afterAll(async () => {
  await vm.close();
  await h.close();
});

let steps = 0;
/** A step's directory of its own on the VM's disk, and a follower of it. */
function step(limits?: { lookBytes: number; maxFollowedBytes: number }) {
  const index = steps++;
  const dir = join(workspace, stepDir("run-uid", 1, index));
  mkdirSync(dir, { recursive: true });
  return {
    dir,
    write: (text: string | Buffer) => appendFileSync(join(dir, "output"), text),
    exit: (code = 0) => writeFileSync(join(dir, "exit"), `${code}\n`),
    follower: new StepFollower(vm, stepPath("run-uid", 1, index), [SECRET], limits),
  };
}

const downloads = () => h.emu.requests.filter((r) => r.path === `/compute/v1/vms/${vmId}/r/v1/files/download`).length;

describe("a step's output followed as it is written", () => {
  it("prints what came since the last look, masked, and all that is left once the exit file is there", async () => {
    const s = step();
    expect(await s.follower.look()).toEqual({ text: "" }); // no output yet
    s.write("building\n");
    expect(await s.follower.look()).toEqual({ text: "building\n" });
    expect(await s.follower.look()).toEqual({ text: "" });
    s.write(`token=${SECRET}\ns3cr`);
    // The value masked; the end that may begin it again held back.
    expect(await s.follower.look()).toEqual({ text: "token=***\n" });
    expect(s.follower.done).toBe(false);
    s.write("ew\n");
    s.exit();
    expect(await s.follower.look()).toEqual({ text: "s3crew\n" });
    expect(s.follower.done).toBe(true);
    expect(s.follower.printed).toBe(`building\ntoken=***\ns3crew\n`);
  });

  it("skips what one look cannot print, saying how much, and masks a value across the cut whole", async () => {
    const s = step({ lookBytes: 40, maxFollowedBytes: 10_000 });
    s.write(`${"a".repeat(100)}${SECRET}${"b".repeat(30)}`);
    const { text } = await s.follower.look();
    // 100 + 23 + 30 bytes; the last 40 start inside the value: it is masked whole.
    expect(text).toBe(`\n[... 113 bytes of output skipped here ...]\n***${"b".repeat(30)}`);
    expect(text).not.toContain(SECRET.slice(-8));
    expect(s.follower.printed).toBeUndefined(); // the kept output can no longer be matched with it
  });

  /** A follower of `s` whose downloads come after `grow()` more bytes were written (a step writing fast). */
  function racing(s: ReturnType<typeof step>, grow: () => string, limits?: { lookBytes: number }) {
    return new StepFollower(
      {
        fileSize: (path) => vm.fileSize(path),
        downloadFileEnds: (path, head, tail) => {
          s.write(grow());
          return vm.downloadFileEnds(path, head, tail);
        },
      },
      stepPath("run-uid", 1, steps - 1),
      [SECRET],
      limits,
    );
  }

  it("prints all that came, nothing skipped, when the file grew while it was read by more than a value's length", async () => {
    const s = step();
    let grow = "";
    const follower = racing(s, () => grow);
    s.write("start\n");
    expect((await follower.look()).text).toBe("start\n");
    s.write(`aaaaa${SECRET}\n`);
    grow = "b".repeat(40) + "\n"; // more than the value's 23 bytes, far less than a look prints
    expect((await follower.look()).text).toBe(`aaaaa***\n${grow}`);
    grow = "";
    s.write("end\n");
    s.exit();
    expect((await follower.look()).text).toBe("end\n");
    // What was printed still matches what the run keeps: its rest is not printed again.
    expect(follower.printed).toBe(`start\naaaaa***\n${"b".repeat(40)}\nend\n`);
    expect(follower.restFrom(`start\naaaaa***\n${"b".repeat(40)}\nend\n`)).toEqual({ text: "" });
  });

  it("masks a value across the cut when the file grew while it was read past what a look prints", async () => {
    const s = step();
    let grow = "";
    const follower = racing(s, () => grow, { lookBytes: 20 });
    s.write("start\n");
    expect((await follower.look()).text).toBe("start\n");
    s.write(`${"a".repeat(30)}${SECRET}`); // the value is bytes 36..59
    grow = "b".repeat(10);
    // It asked for the last 20 + 23 bytes of a file that was 69 by then: bytes 26..69, of which
    // the last 20 are printed, starting inside the value: it is masked whole.
    const { text } = await follower.look();
    expect(text).toBe(`\n[... 43 bytes of output skipped here ...]\n***${"b".repeat(10)}`);
    for (let i = 0; i + 4 <= SECRET.length; i++) expect(text).not.toContain(SECRET.slice(i, i + 4));
  });

  it("does not download a file over the limit, and says so", async () => {
    const s = step({ lookBytes: 40, maxFollowedBytes: 1_000 });
    s.write("x".repeat(2_000));
    const before = downloads();
    expect((await s.follower.look()).note).toMatch(/is not read live any more/);
    expect(s.follower.tooLarge).toBe(true);
    expect(await s.follower.look()).toEqual({ text: "" });
    expect(downloads()).toBe(before);
  });

  it("prints nothing for a step whose directory is gone, and is not done, even with its exit file seen just before", async () => {
    const s = step();
    s.write("half");
    rmSync(s.dir, { recursive: true });
    expect(await s.follower.look()).toEqual({ text: "" });
    expect(s.follower.done).toBe(false);
    // Its exit file there, then the run's directory removed before the output is asked about
    // (the run ended): the rest is not known here, so the caller takes it from what the run keeps.
    const t = step();
    t.write("all of it\n");
    t.exit();
    const follower = new StepFollower(
      {
        fileSize: async (path) => {
          if (path.endsWith("/output")) rmSync(t.dir, { recursive: true, force: true });
          return vm.fileSize(path);
        },
        downloadFileEnds: (path, head, tail) => vm.downloadFileEnds(path, head, tail),
      },
      stepPath("run-uid", 1, steps - 1),
      [SECRET],
    );
    expect(await follower.look()).toEqual({ text: "" });
    expect(follower.done).toBe(false);
  });

  it("does not cut a character in two between looks, with nothing to mask", async () => {
    const index = steps++;
    const dir = join(workspace, stepDir("run-uid", 1, index));
    mkdirSync(dir, { recursive: true });
    const follower = new StepFollower(vm, stepPath("run-uid", 1, index), []);
    const bytes = Buffer.from("héllo\n", "utf8");
    writeFileSync(join(dir, "output"), bytes.subarray(0, 2)); // "h" and half of "é"
    expect((await follower.look()).text).toBe("h");
    appendFileSync(join(dir, "output"), bytes.subarray(2));
    expect((await follower.look()).text).toBe("éllo\n");
  });
});

describe("a file's size (agentd files/info)", () => {
  it("is the published size; a size left out (a Go service's omitempty) is 0; no such file is undefined", async () => {
    const s = step();
    s.write("12345");
    expect(await vm.fileSize(stepPath("run-uid", 1, steps - 1) + "/output")).toBe(5);
    expect(await vm.fileSize(stepPath("run-uid", 1, steps - 1) + "/none")).toBeUndefined();
    h.emu.injectFault({ path: new RegExp(`/r/v1/files/info$`), times: 1, action: { status: 200, body: { path: "/workspace/empty", is_dir: false } } });
    try {
      expect(await vm.fileSize("/workspace/empty")).toBe(0);
    } finally {
      h.emu.clearFaults();
    }
  });
});

describe("a followed step's file: pacing and the rest from what the run keeps", () => {
  it("downloads a large file no more often than the read rate allows, asking nothing in between", async () => {
    const index = steps++;
    const dir = join(workspace, stepDir("run-uid", 1, index));
    mkdirSync(dir, { recursive: true });
    const clock = { ms: 0 };
    const follower = new StepFollower(vm, stepPath("run-uid", 1, index), [], { readBytesPerSecond: 1_000, now: () => clock.ms });
    writeFileSync(join(dir, "output"), "x".repeat(2_000));
    const calls = () => h.emu.requests.filter((r) => r.path.startsWith(`/compute/v1/vms/${vmId}/r/v1/files/`)).length;
    expect((await follower.look()).text).toHaveLength(2_000);
    appendFileSync(join(dir, "output"), "y");
    const before = calls();
    clock.ms = 1_500; // 2,000 bytes at 1,000 a second: the next download not before 2 s
    expect(await follower.look()).toEqual({ text: "" });
    expect(calls()).toBe(before);
    // The look at a step's end is not paced: its file may be gone by the next.
    expect((await follower.look(true)).text).toBe("y");
    // After the pause (2,001 bytes from 1.5 s: 3.5 s), looks read again.
    appendFileSync(join(dir, "output"), "z");
    clock.ms = 3_000;
    expect(await follower.look()).toEqual({ text: "" });
    clock.ms = 3_502;
    expect((await follower.look()).text).toBe("z");
  });

  it("takes the rest of an ended step from what the run keeps: after what was printed, else the kept tail or all of it, said", async () => {
    const s = step();
    s.write("one\ntwo\n");
    expect((await s.follower.look()).text).toBe("one\ntwo\n");
    expect(s.follower.restFrom("one\ntwo\nthree\n")).toEqual({ text: "three\n" });
    // Kept text that does not start with what was printed: cut (its tail), or not.
    const cut = "head\n[... 100 bytes of output cut here ...]\nthe tail\n";
    expect(s.follower.restFrom(cut)).toEqual({ text: "the tail\n", note: expect.stringContaining("the last of it, as the run keeps it") });
    expect(s.follower.restFrom("other\n")).toEqual({ text: "other\n", note: expect.stringContaining("all of it, as the run keeps it") });
  });
});
