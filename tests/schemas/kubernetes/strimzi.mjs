// Validates Strimzi custom resources with the validators of the npm package
// @kubernetes-models/strimzi-kafka-operator (compiled from Strimzi's CRD schemas).
// Usage: node strimzi.mjs <node_modules directory> < objects.json
// stdin: a JSON list of objects; stdout: a JSON list, for each object the list of its errors.
//
// The compiled validators accept unknown fields (the CRDs do not close their objects), while the
// API server with strict field validation rejects them. Each object is therefore validated
// through a proxy that records which fields the validator looks up: an object whose fields were
// looked up by name has a `properties` list, and a field present there but never looked up is
// unknown to the schema. An object with no field looked up is an open map
// (x-kubernetes-preserve-unknown-fields) and keeps any field; one whose fields are iterated
// (additionalProperties with a schema) has each of them looked up.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules] = process.argv.slice(2);
const objects = JSON.parse(readFileSync(0, "utf8"));
const models = join(modules, "@kubernetes-models/strimzi-kafka-operator");

async function model(apiVersion, kind) {
  const [group, version] = apiVersion.split("/");
  if (!/^[a-z0-9.]+$/.test(group) || !/^v[0-9a-z]+$/.test(version) || !/^[A-Za-z]+$/.test(kind)) {
    return null;
  }
  const file = join(models, group, version, `${kind}.js`);
  if (!existsSync(file)) return null;
  return (await import(pathToFileURL(file).href))[kind] ?? null;
}

function tracked(value, seen) {
  if (value === null || typeof value !== "object") return value;
  const looked = new Set();
  seen.set(value, looked);
  const children = new Map();
  const child = (key) => {
    if (!children.has(key)) children.set(key, tracked(value[key], seen));
    return children.get(key);
  };
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key !== "string" || !Object.hasOwn(target, key)) {
        if (typeof key === "string") looked.add(key);
        return Reflect.get(target, key, receiver);
      }
      looked.add(key);
      return child(key);
    },
    has(target, key) {
      if (typeof key === "string") looked.add(key);
      return Reflect.has(target, key);
    },
  });
}

function unknownFields(value, seen, path, found) {
  if (value === null || typeof value !== "object") return found;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, seen, `${path}/${i}`, found));
    return found;
  }
  const looked = seen.get(value);
  const probed = looked !== undefined && looked.size > 0;
  for (const key of Object.keys(value)) {
    if (probed && !looked.has(key)) found.push(`${path}/${key}: unknown field`);
    else unknownFields(value[key], seen, `${path}/${key}`, found);
  }
  return found;
}

const results = [];
for (const obj of objects) {
  const Model = await model(obj.apiVersion, obj.kind);
  if (Model === null) {
    results.push([`${obj.apiVersion} ${obj.kind}: not in the package`]);
    continue;
  }
  const seen = new WeakMap();
  const errors = [];
  try {
    Model.prototype.validate.call(tracked(obj, seen)); // throws a ValidationError
  } catch (err) {
    errors.push(...(err.errors ?? []).map((e) => `${e.instancePath || "/"}: ${e.message}`));
    if (errors.length === 0) errors.push(String(err.message ?? err));
  }
  results.push([...errors, ...unknownFields(obj, seen, "", [])]);
}
process.stdout.write(JSON.stringify(results));
