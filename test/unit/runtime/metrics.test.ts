import { describe, expect, it } from "vitest";
import { kubeResourceOf } from "../../../src/runtime/metrics.js";

describe("kubeResourceOf", () => {
  it("names the resource and subresource of API paths", () => {
    expect(kubeResourceOf("/apis/agentcompute.dev/v1alpha1/namespaces/a/sandboxes/x/status")).toBe("sandboxes/status");
    expect(kubeResourceOf("/apis/agentcompute.dev/v1alpha1/namespaces/a/sandboxes/x")).toBe("sandboxes");
    expect(kubeResourceOf("/apis/agentcompute.dev/v1alpha1/namespaces/a/sandboxes")).toBe("sandboxes");
    expect(kubeResourceOf("/apis/agentcompute.dev/v1alpha1/sandboxes")).toBe("sandboxes");
    expect(kubeResourceOf("/api/v1/namespaces/a/events/e.1")).toBe("events");
    expect(kubeResourceOf("/api/v1/namespaces/a")).toBe("namespaces");
    expect(kubeResourceOf("/api/v1/namespaces")).toBe("namespaces");
    expect(kubeResourceOf("/apis/coordination.k8s.io/v1/namespaces/s/leases/l")).toBe("leases");
    expect(kubeResourceOf("/version")).toBe("other");
  });
});
