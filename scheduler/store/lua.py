"""Lua scripts run atomically inside Redis (one script = one transaction).

Every script takes the key prefix as ARGV[1] and builds keys itself (pasture runs on one
Redis, never Redis Cluster, so undeclared keys are fine). Time is Redis' ``TIME``, so that
heartbeats, the loop and the API agree on one clock.
"""

# The one Lua builder of a job event, the same JSON as ``codec.event`` (``{time, state,
# attempt, reason}``); every script that appends to ``job:<job>:events`` starts with it
# (tests/scheduler/store/test_store_perf.py checks both builders agree).
EVENT = r"""
local function event(jk, now, state, attempt, reason)
  redis.call('RPUSH', jk .. ':events', cjson.encode({time = now, state = state,
             attempt = tonumber(attempt), reason = reason}))
end
"""

_NOW = r"""
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1e6
"""

# ARGV: prefix, expected version, payload JSON
#   payload = {binds: [{job, attempt, nodes, tasks: [{key, node, alloc, task}]}],
#              grows: [same shape: tasks added to a scheduled/running job],
#              shrinks: [{job, attempt, keys: [task key], reason}] (elastic resizes),
#              preemptions: [{job, reason}], pending: {job: reason_json}}
# Returns {1, version, commit time} or {0, error}. All-or-nothing: any failed check aborts
# before a write. Every node given a task (or a task to stop) gets a ``bindings``
# notification, and so does every node a shrunk task leaves. Preempted jobs go to
# jobs:dirty and jobs:changed (the loop re-reads them).
COMMIT = (
    EVENT
    + _NOW
    + r"""
local p = ARGV[1]
local version = tonumber(redis.call('GET', p .. 'version') or '0')
if version ~= tonumber(ARGV[2]) then
  return {0, 'version ' .. ARGV[2] .. ' is stale; store is at ' .. version}
end
local d = cjson.decode(ARGV[3])
local nodes_ok = {}
-- nil when every node of the bind is ready, else the refusal
local function nodes_refused(b)
  for _, t in ipairs(b.tasks) do
    if nodes_ok[t.node] == nil then
      local ns = redis.call('HGET', p .. 'node:' .. t.node, 'state')
      if ns ~= 'ready' then return 'node ' .. t.node .. ' is ' .. tostring(ns) end
      nodes_ok[t.node] = true
    end
  end
  return nil
end
for _, b in ipairs(d.binds) do
  local jk = p .. 'job:' .. b.job
  local st = redis.call('HGET', jk, 'state')
  if st ~= 'queued' then
    return {0, 'job ' .. b.job .. ' is ' .. tostring(st) .. ', not queued'}
  end
  if tonumber(redis.call('HGET', jk, 'attempt')) ~= tonumber(b.attempt) then
    return {0, 'job ' .. b.job .. ' attempt changed'}
  end
  if redis.call('EXISTS', jk .. ':alloc') == 1 then
    return {0, 'job ' .. b.job .. ' already holds an allocation'}
  end
  local refused = nodes_refused(b)
  if refused then return {0, refused} end
end
-- grows: tasks added to a running gang (replicas beyond min_available placed later);
-- a grow whose job moved on (other attempt, ending, stop) or whose task exists is dropped
local grows = {}
for _, b in ipairs(d.grows or {}) do
  local jk = p .. 'job:' .. b.job
  local st = redis.call('HGET', jk, 'state')
  local ok = (st == 'scheduled' or st == 'running')
    and tonumber(redis.call('HGET', jk, 'attempt')) == tonumber(b.attempt)
    and (redis.call('HGET', jk, 'ending') or '') == ''
    and (redis.call('HGET', jk, 'stop_requested') or '') == ''
  for _, t in ipairs(b.tasks) do
    if ok and redis.call('HEXISTS', jk .. ':tasks', t.key) == 1 then ok = false end
  end
  if ok then
    local refused = nodes_refused(b)
    if refused then return {0, refused} end
    table.insert(grows, b)
  end
end
local notify = {}
-- shrinks (elastic resizes, issue 29): replicas of a running job taken away, in this same
-- commit as the placements they make room for. Their ledger entries, node bindings,
-- allocation and task records go (their agents stop them: "no longer bound to this node")
-- and their replicas count as missing again. A shrink of a job on another attempt (its
-- allocation already released) changes nothing.
local shrunk = 0
for _, s in ipairs(d.shrinks or {}) do
  local jk = p .. 'job:' .. s.job
  if tonumber(redis.call('HGET', jk, 'attempt')) == tonumber(s.attempt) then
    local removed = 0
    for _, key in ipairs(s.keys) do
      local lk = s.job .. '/' .. key
      local raw = redis.call('HGET', p .. 'ledger', lk)
      if raw then
        local node = cjson.decode(raw).node
        redis.call('SREM', p .. 'node:' .. node .. ':tasks', lk)
        redis.call('SREM', jk .. ':alloc', lk)
        redis.call('HDEL', p .. 'ledger', lk)
        redis.call('HDEL', jk .. ':tasks', key)
        notify[node] = true
        removed = removed + 1
      end
    end
    if removed > 0 then
      -- the core's regrow cool-down (Policy.regrow_cooldown_s) counts from here
      redis.call('HSET', jk, 'resized_at', tostring(now))
      event(jk, now, redis.call('HGET', jk, 'state'), s.attempt, s.reason)
      shrunk = shrunk + removed
    end
  end
end
-- ledger entry, node binding, job allocation and task record of each task of a bind/grow,
-- and the job's launch record on each node it reaches (node:<n>:launch:<job>: what that
-- node's agent needs to start it, readable by that node alone; RELEASE deletes it)
local function place(b)
  local jk = p .. 'job:' .. b.job
  local launch = nil
  for _, t in ipairs(b.tasks) do
    local lk = b.job .. '/' .. t.key
    redis.call('HSET', p .. 'ledger', lk, cjson.encode(t.alloc))
    redis.call('SADD', p .. 'node:' .. t.node .. ':tasks', lk)
    redis.call('SADD', jk .. ':alloc', lk)
    local task = t.task
    task['scheduled'] = now
    redis.call('HSET', jk .. ':tasks', t.key, cjson.encode(task))
    if launch == nil then
      launch = redis.call('HMGET', jk, 'spec', 'user', 'sealed_secrets', 'uid', 'ssh_key')
    end
    redis.call('HSET', p .. 'node:' .. t.node .. ':launch:' .. b.job, 'job', b.job,
               'attempt', tostring(b.attempt), 'spec', launch[1] or '',
               'user', launch[2] or '', 'sealed_secrets', launch[3] or '',
               'uid', launch[4] or '', 'ssh_key', launch[5] or '')
    notify[t.node] = true
  end
  return jk
end
for _, b in ipairs(grows) do
  local jk = place(b)
  event(jk, now, redis.call('HGET', jk, 'state'), b.attempt,
        #b.tasks .. ' more task(s) placed on ' .. b.nodes)
end
for _, b in ipairs(d.binds) do
  local jk = p .. 'job:' .. b.job
  redis.call('DEL', jk .. ':tasks')
  place(b)
  redis.call('HSET', jk, 'state', 'scheduled', 'scheduled_time', now, 'updated', now,
             'reason', 'placed on ' .. b.nodes, 'pending_reason', '')
  event(jk, now, 'scheduled', b.attempt, 'placed on ' .. b.nodes)
end
for _, v in ipairs(d.preemptions) do
  local jk = p .. 'job:' .. v.job
  local st = redis.call('HGET', jk, 'state')
  if (st == 'scheduled' or st == 'running') and
     (redis.call('HGET', jk, 'ending') or '') == '' then
    redis.call('HSET', jk, 'state', 'preempted', 'updated', now, 'reason', v.reason,
               'ending', cjson.encode({state = 'queued', reason = v.reason, preempted = true}))
    redis.call('SADD', p .. 'jobs:dirty', v.job)
    redis.call('SADD', p .. 'jobs:changed', v.job)
    event(jk, now, 'preempted', redis.call('HGET', jk, 'attempt'), v.reason)
    local tasks = redis.call('HGETALL', jk .. ':tasks')
    for i = 1, #tasks, 2 do
      local t = cjson.decode(tasks[i + 1])
      t['desired'] = 'stop'
      redis.call('HSET', jk .. ':tasks', tasks[i], cjson.encode(t))
      notify[t.node] = true
    end
  end
end
for job, reason in pairs(d.pending) do
  local jk = p .. 'job:' .. job
  if redis.call('HGET', jk, 'state') == 'queued' then
    redis.call('HSET', jk, 'pending_reason', reason)
  end
end
local newv = version
if #d.binds > 0 or #grows > 0 or shrunk > 0 then
  newv = redis.call('INCR', p .. 'version')
  redis.call('HINCRBY', p .. 'stats', 'placements', #d.binds)
end
if #d.preemptions > 0 then
  redis.call('HINCRBY', p .. 'stats', 'preemptions', #d.preemptions)
end
for node, _ in pairs(notify) do
  redis.call('PUBLISH', p .. 'notify:node:' .. node, 'bindings')
  -- the agent's blocking read (BLPOP): one pending wake-up at most
  redis.call('LPUSH', p .. 'node:' .. node .. ':wake', 'bindings')
  redis.call('LTRIM', p .. 'node:' .. node .. ':wake', 0, 0)
end
return {1, tostring(newv), tostring(now)}
"""
)

# ARGV: prefix, job. Drops every ledger entry of the job, its node bindings, its launch
# records (node:<n>:launch:<job>) and its allocation set; bumps the version when anything
# was dropped. Returns {entries dropped, version after}. (``Store.release``; the loop
# queues it in its write batch.)
RELEASE = r"""
local p = ARGV[1]
local jk = p .. 'job:' .. ARGV[2]
local entries = redis.call('SMEMBERS', jk .. ':alloc')
for _, lk in ipairs(entries) do
  local raw = redis.call('HGET', p .. 'ledger', lk)
  if raw then
    local node = cjson.decode(raw).node
    redis.call('SREM', p .. 'node:' .. node .. ':tasks', lk)
    redis.call('DEL', p .. 'node:' .. node .. ':launch:' .. ARGV[2])
  end
  redis.call('HDEL', p .. 'ledger', lk)
end
redis.call('DEL', jk .. ':alloc')
local v
if #entries > 0 then
  v = redis.call('INCR', p .. 'version')
else
  v = tonumber(redis.call('GET', p .. 'version') or '0')
end
return {#entries, v}
"""

# ARGV: prefix, job, fields JSON (the job hash, without created / updated), user,
#       'quiet' to not wake the loop (all but the last job of a batch).
# Creates a job in state submitted in one step: refused (returns 0) when the name is
# taken; else the hash (created = updated = now), the jobs / jobs:vc:<vc> / jobs:active
# indexes, the
# first event, a wake-up of the loop. Returns the creation time (string).
CREATE_JOB = (
    EVENT
    + _NOW
    + r"""
local p = ARGV[1]
local jk = p .. 'job:' .. ARGV[2]
if redis.call('EXISTS', jk) == 1 then return 0 end
local f = cjson.decode(ARGV[3])
local args = {}
for k, v in pairs(f) do
  table.insert(args, k)
  table.insert(args, v)
end
redis.call('HSET', jk, 'created', tostring(now), 'updated', tostring(now), unpack(args))
redis.call('ZADD', p .. 'jobs', now, ARGV[2])
-- the VC's own index: a listing of one VC reads only its jobs (store/jobs.py list_jobs)
redis.call('ZADD', p .. 'jobs:vc:' .. f.vc, now, ARGV[2])
redis.call('SADD', p .. 'jobs:active', ARGV[2])
-- the loop may still hold the record of a deleted job of this name: it reads it again
redis.call('SADD', p .. 'jobs:changed', ARGV[2])
event(jk, now, 'submitted', 1, 'submitted by ' .. ARGV[4])
if ARGV[5] ~= 'quiet' then redis.call('PUBLISH', p .. 'notify:loop', 'submit') end
return tostring(now)
"""
)

# ARGV: prefix, job, task key, attempt, node, new state, exit code ('' = none), message, pid,
#       cause ('' = the task's own outcome, else an infrastructure cause: records.Cause)
#       diagnosis JSON ('' = none: scheduler.rules.diagnosis), 'quiet' to not wake the loop (the
#       loop applying its nodes' reports itself; a flood of self-notifications cost it
#       most of a cycle at 500 jobs/s)
#       usage JSON ('' = none: the ended task's {cpu_s, max_rss}, reports._usage_arg)
# Applies an agent's report when it is about the task's current attempt on that node and
# the task is not finished yet. Returns 1 when applied, 0 when stale.
REPORT_TASK = r"""
local p = ARGV[1]
local jk = p .. 'job:' .. ARGV[2]
local raw = redis.call('HGET', jk .. ':tasks', ARGV[3])
if not raw then return 0 end
local t = cjson.decode(raw)
if tonumber(t.attempt) ~= tonumber(ARGV[4]) or t.node ~= ARGV[5] then return 0 end
local done = {succeeded = true, failed = true, stopped = true, lost = true}
if done[t.state] then return 0 end
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1e6
t.state = ARGV[6]
if ARGV[7] ~= '' then t.exit_code = tonumber(ARGV[7]) end
if ARGV[8] ~= '' then t.message = ARGV[8] end
if ARGV[10] and ARGV[10] ~= '' then t.cause = ARGV[10] end
if ARGV[11] and ARGV[11] ~= '' then t.diagnosis = cjson.decode(ARGV[11]) end
if ARGV[13] and ARGV[13] ~= '' then t.usage = cjson.decode(ARGV[13]) end
if ARGV[6] == 'running' then
  t.started = now
  if ARGV[9] ~= '' then t.handle = ARGV[9] end
else
  t.finished = now
end
redis.call('HSET', jk .. ':tasks', ARGV[3], cjson.encode(t))
redis.call('SADD', p .. 'jobs:dirty', ARGV[2])
if ARGV[12] ~= 'quiet' then redis.call('PUBLISH', p .. 'notify:loop', 'task') end
return 1
"""

# ARGV: prefix, node, stream MAXLEN, then the report's field / value pairs.
# A node agent's report (scheduler/store/agent_store.py): XADD to its own stream, SADD the
# node to reports:pending, and wake the loop only when that made the node pending (the
# loop's settle script wakes itself for reports queued while it applied; reports.py), so
# a busy cluster does not flood the loop with one notification per report. Returns the
# entry id.
NODE_REPORT = r"""
local p = ARGV[1]
local id = redis.call('XADD', p .. 'node:' .. ARGV[2] .. ':reports', 'MAXLEN', '~', ARGV[3],
                      '*', unpack(ARGV, 4))
if redis.call('SADD', p .. 'reports:pending', ARGV[2]) == 1 then
  redis.call('PUBLISH', p .. 'notify:loop', 'task')
end
return id
"""

# ARGV: prefix, node, usage JSON, usage sample JSON ('' = none), sample interval s, samples
# kept. Returns the node's state after the heartbeat, '' when the node is not
# registered, or 'revoked' when an operator force-deleted it (its lease is revoked: the
# agent does not renew it). A heartbeat more than two of the node's heartbeat intervals
# (``heartbeat_interval_s``, 5 s when unknown) after the previous one records
# the gap as ``gap_from`` / ``gap_to`` (store clock; peerloss.PeerWatch). A lost node
# that heartbeats again becomes ready. The usage history (``node:<node>:usage``) gets
# the sample (with ``t`` = now) when the last one is at least the interval old, and is
# trimmed to the newest ``samples`` entries (bounded window); the sample is also added to
# the cluster's per-minute sums ``usage:cluster:<minute start>`` (``cpu_sum``, ``cpu_n``,
# ... ; expire after 2 h).
_HEARTBEAT = r"""
local p = ARGV[1]
local nk = p .. 'node:' .. ARGV[2]
local st = redis.call('HGET', nk, 'state')
if not st then return '' end
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1e6
if redis.call('HGET', nk, 'revoked') == '1' then
  -- an operator force-deleted the node: its lease is revoked, nothing is recorded, and
  -- the agent must not renew its lease (its tasks are fenced before the loop requeues)
  return 'revoked'
end
local prev = tonumber(redis.call('HGET', nk, 'heartbeat') or '') or 0
local every = tonumber(redis.call('HGET', nk, 'heartbeat_interval_s') or '') or 0
if every <= 0 then every = DEFAULT_INTERVAL end
if prev > 0 and now - prev > 2 * every then
  -- a heartbeat gap of more than two intervals: the peer-loss rule reads it
  redis.call('HSET', nk, 'gap_from', prev, 'gap_to', now)
end
redis.call('HSET', nk, 'heartbeat', now, 'usage', ARGV[3])
if ARGV[4] and ARGV[4] ~= '' then
  local last = tonumber(redis.call('HGET', nk, 'usage_sampled') or '0')
  if now - last >= tonumber(ARGV[5]) then
    local sample = cjson.decode(ARGV[4])
    sample['t'] = now
    local hk = nk .. ':usage'
    redis.call('RPUSH', hk, cjson.encode(sample))
    redis.call('LTRIM', hk, -tonumber(ARGV[6]), -1)
    redis.call('EXPIRE', hk, math.max(3600, math.ceil(tonumber(ARGV[5]) * tonumber(ARGV[6]) * 2)))
    redis.call('HSET', nk, 'usage_sampled', now)
    -- the cluster's per-minute sums over all nodes (the dashboard's chart reads 60 keys,
    -- not every node's history)
    local ck = p .. 'usage:cluster:' .. tostring(math.floor(now / 60) * 60)
    for _, f in ipairs({'cpu', 'mem', 'gpu'}) do
      if type(sample[f]) == 'number' then
        redis.call('HINCRBYFLOAT', ck, f .. '_sum', sample[f])
        redis.call('HINCRBY', ck, f .. '_n', 1)
      end
    end
    redis.call('EXPIRE', ck, 7200)
  end
end
if st == 'lost' then
  -- a deleted node whose agent came back is a node again (HSET: the node's ACL user
  -- may not HDEL)
  redis.call('HSET', nk, 'state', 'ready', 'deleted', '')
  ON_READY
  redis.call('PUBLISH', p .. 'notify:loop', 'node')
  return 'ready'
end
return st
"""
# A direct caller (the loop's tests, the bench's simulated agents) bumps the version itself.
_HEARTBEAT = _HEARTBEAT.replace("DEFAULT_INTERVAL", "5")  # the agent's default interval (s)
HEARTBEAT = _HEARTBEAT.replace("ON_READY", "redis.call('INCR', p .. 'version')")
# An agent may not bump the version (its ACL user, acl.py): it leaves a ``{kind: node}``
# report (ARGV[7]: the stream's MAXLEN) on which the loop bumps it (reports.py).
NODE_HEARTBEAT = _HEARTBEAT.replace(
    "ON_READY",
    "redis.call('XADD', nk .. ':reports', 'MAXLEN', '~', ARGV[7], '*', 'kind', 'node')\n"
    "  redis.call('SADD', p .. 'reports:pending', ARGV[2])",
)
