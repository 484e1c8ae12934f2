// A step's output as a run reports it: tail in status, capped whole in the ConfigMap, secrets masked.
import { describe, expect, it } from "vitest";
import { GrowingOutput, boundedOutput, cap, lastLine, mask, maskingSecretNames, outputWindow, tail } from "../../../src/runs/output.js";
import type { FileEnds } from "../../../src/service/agentd.js";

/** What AgentdClient.downloadFileEnds reads of `text` with the window for `budget` and `secrets`. */
function ends(text: string, budget: number, secrets: string[]): FileEnds {
  return endsOf(Buffer.from(text, "utf8"), budget, secrets);
}

function endsOf(buf: Buffer, budget: number, secrets: string[]): FileEnds {
  const { headBytes, tailBytes } = outputWindow(budget, secrets);
  const head = buf.subarray(0, headBytes);
  const rest = buf.subarray(head.length);
  return { head, tail: rest.subarray(Math.max(0, rest.length - tailBytes)), size: buf.length };
}

describe("step output", () => {
  it("keeps the tail on a character boundary", () => {
    expect(tail("short", 10)).toBe("short");
    expect(tail("0123456789", 4)).toBe("6789");
    expect(tail("aé", 1)).toBe(""); // never half a character
  });

  it("caps long output keeping head and tail, with a marker saying how much was cut", () => {
    const text = "x".repeat(5000) + "END";
    const out = cap(text, 1000);
    expect(Buffer.byteLength(out)).toBeLessThanOrEqual(1000);
    expect(out.startsWith("xxx")).toBe(true);
    expect(out.endsWith("END")).toBe(true);
    expect(out).toMatch(/\[\.\.\. \d+ bytes of output cut here \.\.\.\]/);
    expect(cap("small", 1000)).toBe("small");
  });

  it("masks secret values, longest first, and leaves very short ones alone", () => {
    expect(mask("token=abcdef and abcdefgh, id=ab", ["abcdef", "abcdefgh", "ab"])).toBe("token=*** and ***, id=ab");
  });

  it("masks a value printed without the newline it was stored with, and each line of a value of several", () => {
    const fromFile = "tok-9f8e7d6c\n"; // kubectl create secret --from-file keeps the file's newline
    expect(mask("Authorization: Bearer tok-9f8e7d6c.", [fromFile])).toBe("Authorization: Bearer ***.");
    const pem = "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkq\r\nhkiG9w0BAQEFAASC\r\n-----END KEY-----\r\n";
    const printed = "line 1: hkiG9w0BAQEFAASC (from the key)";
    expect(mask(printed, [pem])).toBe("line 1: *** (from the key)");
    expect(mask(`key:\n${pem}`, [pem])).toBe("key:\n***");
    // Lines too short to be anything but ordinary text stay (a YAML Secret's "enabled: true").
    expect(mask("enabled: true; name: admin", ["enabled: true\nname: admin\ntoken: 0123456789abcdef"])).toBe("enabled: true; name: admin");
    expect(mask("token: 0123456789abcdef", ["enabled: true\nname: admin\ntoken: 0123456789abcdef"])).toBe("***");
  });

  it("masks overlapping secret values as one, leaving no part of either", () => {
    expect(mask("x password1234abcd y", ["password1", "1234abcd"])).toBe("x *** y");
    expect(mask("é-secret-é", ["secret"])).toBe("é-***-é");
  });

  it("takes the last non-empty line for messages, never the cut's marker", () => {
    expect(lastLine("one\ntwo\n\n")).toBe("two");
    expect(lastLine("")).toBeUndefined();
    expect(lastLine(cap("error: disk full\n" + "\n".repeat(5000), 1000))).toBe("error: disk full");
  });
});

describe("step output read by its ends", () => {
  const SECRET = "s3cr3t-value-0123456789";
  const budget = 1000;
  const half = Math.floor((budget - 80) / 2);

  it("reads all of a file the budget holds, whatever the secrets", () => {
    const text = "z".repeat(budget);
    expect(boundedOutput(ends(text, budget, []), [], budget)).toBe(text);
  });

  it("is what capping the whole masked text gives when the window holds the file", () => {
    const long = "L".repeat(60);
    for (const [text, secrets] of [["short " + SECRET, [SECRET]], ["y".repeat(980) + long, [long]]] as const) {
      expect(boundedOutput(ends(text, budget, [...secrets]), secrets, budget)).toBe(cap(mask(text, secrets), budget));
    }
  });

  it("keeps the head and the tail of a huge file, with how much was cut, within the budget", () => {
    const text = "HEAD" + "x".repeat(1_000_000) + "TAIL";
    const out = boundedOutput(ends(text, budget, []), [], budget);
    expect(out.startsWith("HEADxxx")).toBe(true);
    expect(out.endsWith("xxxTAIL")).toBe(true);
    expect(Buffer.byteLength(out)).toBeLessThanOrEqual(budget);
    const cut = Number(/\[\.\.\. (\d+) bytes of output cut here \.\.\.\]/.exec(out)?.[1]);
    expect(cut).toBe(text.length - 2 * half);
  });

  it("stays within the budget when a step prints binary (bytes that are not UTF-8)", () => {
    const random = Buffer.alloc(1_000_000);
    for (let i = 0; i < random.length; i++) random[i] = (i * 7919 + (i >> 3) * 104729) & 0xff;
    for (const bytes of [Buffer.alloc(1_000_000, 0xff), random, Buffer.alloc(budget - 100, 0xff)]) {
      const out = boundedOutput(endsOf(bytes, budget, [SECRET]), [SECRET], budget);
      expect(Buffer.byteLength(out)).toBeLessThanOrEqual(budget);
      expect(out).not.toContain("\uFFFD");
    }
  });

  it("never leaves part of a secret in clear where the output is cut", () => {
    const filler = "x".repeat(1_000_000);
    // A secret across the head's cut, one across the tail's, and one just out of each window.
    for (let shift = -SECRET.length; shift <= SECRET.length; shift++) {
      const head = "h".repeat(half + shift) + SECRET;
      const tailPart = SECRET + "t".repeat(half + shift);
      const out = boundedOutput(ends(head + filler + tailPart, budget, [SECRET]), [SECRET], budget);
      expect(out).not.toContain(SECRET.slice(0, 4));
      expect(out).not.toContain(SECRET.slice(-4));
      expect(out.split("\n[...")[0]).toMatch(/^h+(\*\*\*)?$/);
      expect(out.split("...]\n")[1]).toMatch(/^(\*\*\*)?t+$/);
    }
  });

  it("masks every secret inside the ends, and cuts on character boundaries", () => {
    const text = `é${SECRET}é`.repeat(40) + "é".repeat(600_000) + `${SECRET}ü`.repeat(40);
    const out = boundedOutput(ends(text, budget, [SECRET]), [SECRET], budget);
    expect(out).not.toContain("\uFFFD");
    expect(out).not.toContain(SECRET.slice(0, 4));
    expect(out).toContain("é***é");
    expect(out).toContain("***ü");
  });
});


describe("step output read as it grows (logs -f)", () => {
  const SECRET = "s3cret-value-xyz";
  /** The text printed when `whole` comes in the given chunk sizes, then ends. */
  function printed(whole: string, sizes: number[]): string[] {
    const out = new GrowingOutput([SECRET]);
    const bytes = Buffer.from(whole, "utf8");
    const texts: string[] = [];
    let at = 0;
    for (const n of sizes) {
      texts.push(out.push(bytes.subarray(at, at + n)));
      at += n;
    }
    texts.push(out.push(bytes.subarray(at), { ended: true }));
    return texts;
  }

  it("prints each chunk as it comes, holding back only what may begin a secret value", () => {
    const texts = printed(`first line\ntoken=${SECRET}\nlast\n`, [11, 6, 5, 20]);
    expect(texts.join("")).toBe("first line\ntoken=***\nlast\n");
    expect(texts[0]).toBe("first line\n"); // nothing in it begins the value
    expect(texts[1]).toBe("token="); // then "s3cre" came, which may: held back
    expect(texts[2]).toBe("");
    expect(texts[3]).toBe("***\nlast\n");
  });

  it("finds a value that begins inside one already masked (one's end is the other's start)", () => {
    const out = new GrowingOutput(["xxxxxxxxABCDEFGH", "ABCDEFGHIJKLMNOP"]);
    expect(out.push(Buffer.from("hello xxxxxxxxABCDEFGH"))).toBe("hello ***");
    const rest = out.push(Buffer.from("IJKLMNOP bye"), { ended: true });
    expect(rest).not.toContain("IJKL");
    expect(rest).toBe("*** bye");
  });

  it("never prints part of a value, however it is cut between reads", () => {
    const whole = `a${SECRET}b${SECRET}${SECRET}c`;
    const pieces = Array.from({ length: SECRET.length - 3 }, (_, i) => SECRET.slice(i, i + 4));
    for (let cut = 1; cut < whole.length; cut++) {
      const text = printed(whole, [cut, 3, 7]).join("");
      for (const piece of pieces) expect(text).not.toContain(piece);
      // Two values side by side are one mask or two, by where the reads fell.
      expect(text).toMatch(/^a\*\*\*b\*\*\*(\*\*\*)?c$/);
    }
  });

  it("after a gap starts at `from`, masking a value that crosses it whole", () => {
    const out = new GrowingOutput([SECRET]);
    const lead = Buffer.from(`xx${SECRET}yy`, "utf8");
    // The new text starts in the middle of the value: it is masked whole, not printed from its middle.
    expect(out.push(lead, { ended: true, from: 6 })).toBe("***yy");
    expect(out.push(Buffer.from("zz"), { ended: true })).toBe("zz");
  });

  it("holds back what may be a value begun inside one already masked, however the rest comes", () => {
    const pieces = (values: string[], chunks: string[]) => {
      const out = new GrowingOutput(values);
      return chunks.map((c, i) => out.push(Buffer.from(c), { ended: i === chunks.length - 1 }));
    };
    // `1234abcd` begins inside `password1`, and its middle comes alone.
    const a = pieces(["password1", "1234abcd"], ["password1", "23", "4abcd"]);
    expect(a.join("")).not.toMatch(/23|4abcd/);
    expect(a.join("")).toMatch(/^(\*\*\*)+$/);
    // A value that begins as it ends, printed twice overlapping.
    const b = pieces(["tok-SECRETMIDDLE-tok"], ["tok-SECRETMIDDLE-tok", "-SECRETMIDDLE-", "tok"]);
    expect(b.join("")).not.toContain("SECRET");
  });

  it("does not cut a character in two at the hold-back point", () => {
    const texts = printed(`${"é".repeat(40)}`, [41]);
    expect(texts.join("")).toBe("é".repeat(40));
    expect(texts[0]).not.toContain("?");
  });

  it("masks with the run's own Secrets and its VM's envFrom, each named once", () => {
    const names = maskingSecretNames(
      { steps: [], envFrom: [{ secretRef: { name: "a" } }], files: [{ path: "k", secretKeyRef: { name: "b", key: "k" } }, { path: "c", configMapKeyRef: { name: "cm", key: "c" } }] } as never,
      { spec: { envFrom: [{ secretRef: { name: "a" } }, { secretRef: { name: "vm" } }] } } as never,
    );
    expect(names).toEqual({ own: ["a", "b"], all: ["a", "b", "vm"] });
  });
});

describe("secret values as a step may write them", () => {
  it("masks a value as a JSON string writes it (a PEM key's line breaks, quotes) and as a URL encodes it", () => {
    const pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----\n";
    const quoted = 'pa"ss\\word-1234';
    const env = JSON.stringify({ KEY: pem, PASS: quoted });
    expect(mask(env, [pem, quoted])).toBe('{"KEY":"***","PASS":"***"}');
    expect(mask(`https://host/?p=${encodeURIComponent("p@ss word/1234")}`, ["p@ss word/1234"])).toBe("https://host/?p=***");
  });

  it("masks a value as a Go program writes it (the service clients scrub the same forms): JSON's \\u0026, a query's + for a space", () => {
    expect(mask('{"url":"https://x/?a=1\\u0026key=k3y-\\u003cv\\u003e"}', ["https://x/?a=1&key=k3y-<v>"])).toBe('{"url":"***"}');
    expect(mask("GET /?p=p%40ss+word%2F1234", ["p@ss word/1234"])).toBe("GET /?p=***");
  });
});

describe("what is too short, or not text, to mask in its other forms", () => {
  it("does not mask a value that is short without its line break (\"dev\\n\"), nor blank", () => {
    expect(mask("deploying to dev\nok\n", ["dev\n", "    "])).toBe("deploying to dev\nok\n");
  });

  it("masks a value that is not text only as its bytes come, not as JSON or URL escapes of them", () => {
    const binary = Buffer.from([0xff, 0xfe, 0x00, 0x41, 0x42, 0x43, 0x44]).toString("utf8");
    // Its escaped forms (three times as long, as %EF%BF%BD) would widen what is read at each
    // end of a file, and held back, for nothing.
    expect(new GrowingOutput([binary]).longest).toBe(Buffer.byteLength(binary));
  });
});
