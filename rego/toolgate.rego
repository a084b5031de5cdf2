# Toolgate's policy: may this tool call run, does it need a person's approval, or is it refused?
#
# Answer: data.toolgate.decision = {"result": "allow" | "require_approval" | "deny",
#                                   "reasons": [string, ...]}
# plus "approver_roles" (who may approve) when the result is require_approval.
# And for MCP tools/list: data.toolgate.listed = true | false, could this actor ever be allowed to
# call this tool in this workspace? Asked with a listing input: tool, actor, workspace only.
#
# Input (built by the gateway, documented in docs/policies.md): tool {name, version, risk,
# side_effect, reversible, adapter, operation, tags}, arguments, arguments_sha256, paths
# [{argument, relative, inside_workspace}], actor {user_id, agent_id, roles}, workspace {id,
# root}, request {..., time_ms}, approval {present, approved_by}, usage {...}.
# Data (policies/*.yaml, merged under data.toolgate): actors, workspaces, protected_paths,
# risk_rules, tool_overrides, approval_tags, approvers, quotas (quotas are enforced by the
# gateway, not here).
#
# How it reads, and how to extend it: `deny_reasons`, `standing_refusals` and `approval_reasons`
# are partial sets. Each check that can refuse is one `deny_reasons contains msg if { ... }`
# rule, or a `standing_refusals contains msg if { ... }` rule when it reads only the tool, the
# actor and the workspace (never arguments, paths, request, approval: it then refuses every call
# of the tool by that actor there, and `listed` hides the tool); each rule that wants a person
# is one `approval_reasons contains msg if { ... }` rule; `decision` applies
# deny > require_approval > allow. Any module of package `toolgate` (any other file in rego/)
# may add definitions to the sets without touching this file (docs/tasks/first-rule.md).
# Every message names the data rule behind it.
#
# Fail closed: a missing or malformed input field never allows. Checks are written so that an
# undefined value makes their `not ...` true, and messages use the placeholders of `call`.
#
# Cost: the embedded engine (the regorus interpreter) pays about a microsecond for every builtin
# call, data lookup or comprehension, and a few for every rule definition it evaluates. Hence
# the facts shared by several checks are computed once in `call`, and within a check the
# cheapest condition comes first. Only the helpers `call`, `tool_override`, `rule` and
# `rule_source` are shared; an extension module may use them too.
#
# Caching: the gateway caches decisions by the parts of `input` that these modules can read
# (docs/policies.md). Read input through fixed paths (`input.tool.name`, `input.paths[_]`,
# `object.get(input, ["actor", "user_id"], ...)`); reading `input` as a whole or by a computed
# key, or calling a non-deterministic builtin (time.now_ns, rand.intn, ...), turns the cache
# off. For the time of the call read `input.request.time_ms`.
#
# Never read `data.toolgate` as a whole: it contains this package's own rules (a recursion).
package toolgate

# --- the decision ---------------------------------------------------------------------------

decision := {"result": "deny", "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {
	"result": "require_approval",
	"reasons": sort(approval_reasons),
	"approver_roles": sort(approver_roles),
} if {
	count(approval_reasons) > 0
	not input.approval.present == true
} else := {"result": "allow", "reasons": [msg]} if {
	count(approval_reasons) > 0
	input.approval.present == true
	msg := sprintf("approved by '%v': %v", [call.approver, concat("; ", sort(approval_reasons))])
} else := {"result": "allow", "reasons": [msg]} if {
	count(approval_reasons) == 0
	msg := sprintf(
		"%v-risk tool %v allowed for actor '%v' (rule: %v)",
		[call.risk, call.tool, call.actor, rule_source("roles")],
	)
}

# --- shared facts ---------------------------------------------------------------------------

# Names of the call, with placeholders so that lookups fail and messages stay defined when the
# input lacks a field; and the actor's roles.
call := {
	"actor": actor_id,
	"workspace": object.get(input, ["workspace", "id"], "(missing)"),
	"tool": object.get(input, ["tool", "name"], "(missing)"),
	"risk": object.get(input, ["tool", "risk"], "(missing)"),
	"approver": object.get(input, ["approval", "approved_by"], "(missing)"),
	# Roles come from policy data, and from the caller's verified credential (a JWT's claims,
	# mapped by the gateway's configuration: actor.credential.roles), never from the request
	# body: a caller cannot grant itself a role.
	"roles": data_roles | credential_roles,
}

actor_id := object.get(input, ["actor", "user_id"], "(missing)")

data_roles := {r | some r in data.toolgate.actors[actor_id].roles}

credential_roles := {r | some r in input.actor.credential.roles; is_string(r)}

# The tool's overrides, {} when it has none (an `else`: cheaper than a `default` rule).
tool_override := override if {
	override := data.toolgate.tool_overrides[call.tool]
} else := {}

# The rule for this call: the rule of the tool's risk with the tool's overrides on top.
rule := object.union(data.toolgate.risk_rules[call.risk], tool_override)

# Which data key decided `key` of `rule`, so that a message can name it.
rule_source(key) := sprintf("tool_overrides.%v.%v", [call.tool, key]) if {
	key in object.keys(tool_override)
} else := sprintf("risk_rules.%v.%v", [call.risk, key])

# --- listing: could the actor ever be allowed to call the tool here? ------------------------

# Asked by MCP tools/list with a listing input ({tool, actor, workspace}: no call), once per
# tool. True when no standing refusal holds. A standing refusal reads only what the listing
# input carries, which is the same for every call of the tool by the actor in the workspace,
# and it refuses each of those calls: a tool left out is one no call could use. A listed tool
# may still be refused for a call's arguments, paths, time or approval. Undefined or an error
# means not listed (the gateway fails closed).
default listed := false

listed if count(standing_refusals) == 0

# --- the checks that refuse (partial: any module of package toolgate may add one) ----

# Every standing refusal refuses the call too.
deny_reasons contains msg if {
	some msg in standing_refusals
}

standing_refusals contains msg if {
	# who: an actor missing from the data whose credential carries no role either
	not data.toolgate.actors[call.actor]
	count(credential_roles) == 0
	msg := sprintf("actor '%v' is unknown (rule: actors)", [call.actor])
}

standing_refusals contains msg if {
	# who: an actor listed without roles
	count(call.roles) == 0
	data.toolgate.actors[call.actor]
	msg := sprintf("actor '%v' has no roles (rule: actors.%v.roles)", [call.actor, call.actor])
}

standing_refusals contains msg if {
	# where: a workspace missing from the data
	not data.toolgate.workspaces[call.workspace]
	msg := sprintf("workspace '%v' is unknown (rule: workspaces)", [call.workspace])
}

standing_refusals contains msg if {
	# where: an actor who is not a member, by name (members) or by a role (member_roles); a
	# workspace with neither list admits nobody
	workspace := data.toolgate.workspaces[call.workspace]
	not call.actor in object.get(workspace, "members", [])
	count({r | some r in object.get(workspace, "member_roles", []); r in call.roles}) == 0
	msg := sprintf(
		"actor '%v' is not a member of workspace '%v' (rule: workspaces.%v.members)",
		[call.actor, call.workspace, call.workspace],
	)
}

deny_reasons contains msg if {
	# where: every path argument must resolve inside the workspace, whatever the tool does
	some p in input.paths
	not p.inside_workspace == true
	msg := sprintf(
		"argument '%v' points outside the workspace (rule: paths.inside_workspace)",
		[object.get(p, "argument", "?")],
	)
}

deny_reasons contains msg if {
	# where: without a relative path the protected-path check could not see the path at all
	some p in input.paths
	not is_string(p.relative)
	msg := sprintf(
		"argument '%v' has no workspace-relative path (rule: paths.relative)",
		[object.get(p, "argument", "?")],
	)
}

deny_reasons contains msg if {
	# where: tools that write (or act on the outside world) may not touch protected paths. An
	# entry matches as whole path components anywhere in the path: ".git/" protects ".git",
	# ".git/config" and "sub/.git/HEAD" (nested repositories), but not "my.git/x".
	input.tool.side_effect in {"write", "external"}
	some p in input.paths
	is_string(p.relative)
	some entry in data.toolgate.protected_paths
	contains(concat("", ["/", p.relative, "/"]), concat("", ["/", trim_right(entry, "/"), "/"]))
	msg := sprintf(
		"argument '%v' writes to protected path '%v' (rule: protected_paths)",
		[object.get(p, "argument", "?"), entry],
	)
}

standing_refusals contains msg if {
	# what: a tool risk without a rule
	not data.toolgate.risk_rules[call.risk]
	msg := sprintf("no rule for risk '%v' of tool %v (rule: risk_rules)", [call.risk, call.tool])
}

standing_refusals contains msg if {
	# what: the actor needs one of the roles of the rule (an actor without roles is denied above)
	count(call.roles) > 0
	count({r | some r in rule.roles; r in call.roles}) == 0
	msg := sprintf(
		"no role of actor '%v' may call %v-risk tool %v (rule: %v)",
		[call.actor, call.risk, call.tool, rule_source("roles")],
	)
}

standing_refusals contains msg if {
	# what: a critical action that cannot be undone, unless the data explicitly allows it
	call.risk == "critical"
	not input.tool.reversible == true
	not rule.allow_irreversible == true
	msg := sprintf(
		"critical irreversible tool %v is denied (rule: %v)",
		[call.tool, rule_source("allow_irreversible")],
	)
}

deny_reasons contains msg if {
	# approval: an approval that does not count, for a call that needs one, refuses the call
	# outright rather than asking again: the approvals module should not have accepted it.
	input.approval.present == true
	count(approval_reasons) > 0
	some msg in approval_refusals
}

# --- approval -------------------------------------------------------------------------------

approval_reasons contains msg if {
	rule.approval == true
	msg := sprintf("tool %v requires approval (rule: %v)", [call.tool, rule_source("approval")])
}

# A tag of the tool (tools.d) listed in approval_tags needs approval whatever the tool's risk
# (shipped: runs_agent_code, a tool that runs code the agent supplies), unless the tool's
# overrides say `approval: false`.
approval_reasons contains msg if {
	some tag in input.tool.tags
	why := data.toolgate.approval_tags[tag]
	not tool_override.approval == false
	msg := sprintf("tool %v is tagged %v: %v (rule: approval_tags.%v)", [call.tool, tag, why, tag])
}

# Who may approve a call of this risk: by_risk[risk] if listed, else default; with neither,
# nobody (an empty list: the call still waits for an approval, which nobody can give).
approver_roles := object.get(
	approver_data,
	["by_risk", call.risk],
	object.get(approver_data, "default", []),
)

approver_data := data.toolgate.approvers if {
	is_object(data.toolgate.approvers)
} else := {}

approval_refusals contains msg if {
	not is_approver(call.approver)
	msg := sprintf(
		"approval by '%v' refused: not an approver for %v-risk tools (rule: %v)",
		[call.approver, call.risk, approver_rule],
	)
}

approval_refusals contains msg if {
	call.approver == call.actor
	not data.toolgate.approvers.allow_self_approval == true
	msg := sprintf(
		"approval by '%v' refused: nobody approves their own call (rule: approvers.allow_self_approval)",
		[call.approver],
	)
}

is_approver(id) if {
	some r in data.toolgate.actors[id].roles
	r in approver_roles
}

approver_rule := sprintf("approvers.by_risk.%v", [call.risk]) if {
	data.toolgate.approvers.by_risk[call.risk]
} else := "approvers.default"
