-- Argo CD health check for trainguard.dev/WorkloadRecovery (Lua 5.1, as Argo CD's gopher-lua).
-- The Trainguard operator creates one WorkloadRecovery per watched training job and writes its
-- status: phase, the Ready condition (True when nothing is open, under way or waiting for a
-- person; False with the reason) and status.observedGeneration. Mapping:
--   no status yet, or a status of an older generation  -> Progressing
--   phase Recovering (a recovery is being carried out)  -> Progressing
--   phase Held (the job waits for a release)            -> Suspended
--   Ready=True                                          -> Healthy
--   Ready=False otherwise (anomaly open, job failed,
--     no policy, recovery abandoned)                    -> Degraded
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
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Trainguard operator to report on the workload"
  return hs
end
if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Trainguard operator to read generation " .. tostring(generation)
  return hs
end

local phase = status.phase
if phase == "Recovering" then
  hs.status = "Progressing"
  hs.message = "Recovering: attempt " .. tostring(status.attempt)
  return hs
end
if phase == "Held" then
  hs.status = "Suspended"
  hs.message = "Held: the job waits for a release"
  return hs
end

local ready = condition(status.conditions, "Ready")
if ready == nil then
  -- An operator that predates the Ready condition: the phase alone decides.
  if phase == "Running" or phase == "Succeeded" or phase == "Stopped" then
    hs.status = "Healthy"
  else
    hs.status = "Degraded"
  end
  hs.message = phase
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = phase .. ": " .. (ready.message or "")
  return hs
end
if ready.status == "Unknown" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = phase .. ": " .. (ready.reason or "NotReady") .. ": " .. (ready.message or "")
return hs
