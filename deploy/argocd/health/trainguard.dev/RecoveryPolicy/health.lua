-- Argo CD health check for trainguard.dev/RecoveryPolicy (Lua 5.1, as Argo CD's gopher-lua).
-- Reads what the Trainguard operator writes: status.observedGeneration and the Ready condition
-- (which mirrors Accepted: in force or not, with the reason). A policy in Monitor mode is in force
-- and working as intended (Monitor is the default and the usual first weeks of an install): it is
-- Healthy, and its message says that advice is only recorded. Reporting it as Suspended would make
-- every Argo CD Application holding a default install look paused.
local hs = {}

local function condition(conditions, type_)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local generation = obj.metadata.generation
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Trainguard operator to read the policy"
  return hs
end
if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Trainguard operator to read generation " .. tostring(generation)
  return hs
end

-- Ready is the summary condition; Accepted is read when an older operator wrote no Ready.
local ready = condition(status.conditions, "Ready")
if ready == nil then
  ready = condition(status.conditions, "Accepted")
end
if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Trainguard operator to accept or reject the policy"
  return hs
end
if ready.status == "False" then
  hs.status = "Degraded"
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
  return hs
end

local mode = "Monitor"
if obj.spec ~= nil and obj.spec.mode ~= nil then
  mode = obj.spec.mode
end
if mode == "Monitor" then
  hs.status = "Healthy"
  hs.message = "Monitor mode: advice is recorded, nothing is carried out"
  return hs
end
hs.status = "Healthy"
hs.message = ready.message or "In force"
return hs
