# Unit tests of rego/toolgate.rego, OPA style: every rule named test_* must evaluate to true.
# Run them with `toolgate policy test` (or `opa test rego/ <data>` against a bundle).
#
# They run against the shipped policy data (policies/*.yaml); where a test needs other data it
# says so with `with data.toolgate.<key> as ...`.
package toolgate_test

import data.toolgate

# A realistic call: alice writes notes/a.txt in workspace demo with a medium-risk tool.
base := {
	"tool": {
		"name": "fs.write_file", "version": "1.2.0", "risk": "medium", "side_effect": "write",
		"reversible": false, "adapter": "file", "tags": ["fs"],
	},
	"arguments": {"path": "notes/a.txt", "content": "hi"},
	"arguments_sha256": "9b1e1b2a",
	"paths": [{"argument": "path", "relative": "notes/a.txt", "inside_workspace": true}],
	"action": {"kind": "file"},
	"actor": {"user_id": "alice", "agent_id": "coder", "roles": ["agent"]},
	"workspace": {"id": "demo", "root": "/srv/toolgate/var/workspaces/demo"},
	"request": {
		"run_id": "r1", "turn_id": "t1", "call_id": "c1",
		"deadline_ms_left": 9000, "idempotency_key_present": true,
		"time_ms": 1764579600000,
	},
	"approval": {"present": false, "approved_by": null},
	"usage": {},
}

# The base call with `patches` merged in, in order (objects merge deeply, arrays are replaced).
call(patches) := object.union_n(array.concat([base], patches))

delete_file := {"tool": {"name": "fs.delete_file"}}

critical := {"tool": {"name": "db.drop_table", "risk": "critical", "side_effect": "external"}}

reversible := {"tool": {"reversible": true}}

actor(id) := {"actor": {"user_id": id}}

approved_by(id) := {"approval": {"present": true, "approved_by": id}}

path(relative, inside) := {"paths": [{
	"argument": "path",
	"relative": relative,
	"inside_workspace": inside,
}]}

# The shipped actors plus two admins, for the critical-risk rules.
actors_with_admins := object.union(data.toolgate.actors, {
	"dave": {"roles": ["admin"]},
	"erin": {"roles": ["admin"]},
})

reasons_mention(decision, text) if {
	some reason in decision.reasons
	contains(reason, text)
}

# --- allow ------------------------------------------------------------------------------------

test_member_agent_may_write_in_demo if {
	d := toolgate.decision with input as base
	d.result == "allow"
	reasons_mention(d, "rule: risk_rules.medium.roles")
}

test_low_risk_read_allowed_for_approver if {
	read := {"tool": {"name": "fs.read_file", "risk": "low", "side_effect": "read"}}
	d := toolgate.decision with input as call([read, actor("bob")])
	d.result == "allow"
}

test_approval_on_a_call_that_needs_none_changes_nothing if {
	d := toolgate.decision with input as call([approved_by("bob")])
	d.result == "allow"
}

# --- require_approval -------------------------------------------------------------------------

test_tool_override_requires_approval if {
	d := toolgate.decision with input as call([delete_file])
	d.result == "require_approval"
	reasons_mention(d, "rule: tool_overrides.fs.delete_file.approval")
	d.approver_roles == ["approver"]
}

test_high_risk_requires_approval if {
	d := toolgate.decision with input as call([{"tool": {"name": "proc.run", "risk": "high"}}])
	d.result == "require_approval"
	reasons_mention(d, "rule: risk_rules.high.approval")
}

test_override_can_lift_approval if {
	d := toolgate.decision with input as call([delete_file])
		with data.toolgate.tool_overrides as {"fs.delete_file": {"approval": false}}
	d.result == "allow"
}

# A tool that runs code the agent supplies (proc.python), tagged runs_agent_code in tools.d.
agent_code := {"tool": {
	"name": "proc.python", "adapter": "process", "side_effect": "write",
	"tags": ["process", "runs_agent_code"],
}}

test_a_tool_that_runs_agent_code_requires_approval if {
	d := toolgate.decision with input as call([agent_code, {"paths": []}])
	d.result == "require_approval"
	reasons_mention(d, "rule: approval_tags.runs_agent_code")
}

test_agent_code_approved_by_an_approver_runs if {
	d := toolgate.decision with input as call([agent_code, {"paths": []}, approved_by("bob")])
	d.result == "allow"
	reasons_mention(d, "approved by 'bob'")
}

test_tool_override_lifts_the_agent_code_approval if {
	d := toolgate.decision with input as call([agent_code, {"paths": []}])
		with data.toolgate.tool_overrides as {"proc.python": {"approval": false}}
	d.result == "allow"
}

test_without_approval_tags_the_risk_rule_alone_decides if {
	d := toolgate.decision with input as call([agent_code, {"paths": []}])
		with data.toolgate.approval_tags as {}
	d.result == "allow"
}

# --- approvals --------------------------------------------------------------------------------

test_approval_by_an_approver_allows if {
	d := toolgate.decision with input as call([delete_file, approved_by("bob")])
	d.result == "allow"
	reasons_mention(d, "approved by 'bob'")
}

test_self_approval_refused if {
	d := toolgate.decision with input as call([delete_file, actor("carol"), approved_by("carol")])
	d.result == "deny"
	reasons_mention(d, "rule: approvers.allow_self_approval")
}

test_self_approval_allowed_when_the_data_says_so if {
	d := toolgate.decision with input as call([delete_file, actor("carol"), approved_by("carol")])
		with data.toolgate.approvers.allow_self_approval as true
	d.result == "allow"
}

test_approval_by_a_non_approver_refused if {
	d := toolgate.decision with input as call([delete_file, actor("carol"), approved_by("alice")])
	d.result == "deny"
	reasons_mention(d, "approval by 'alice' refused: not an approver")
}

test_approval_by_an_unknown_principal_refused if {
	d := toolgate.decision with input as call([delete_file, approved_by("mallory")])
	d.result == "deny"
	reasons_mention(d, "rule: approvers.default")
}

test_approval_present_without_approver_refused if {
	d := toolgate.decision with input as call([delete_file, {"approval": {"present": true}}])
	d.result == "deny"
}

test_no_approver_roles_still_requires_approval_and_refuses_every_approver if {
	d := toolgate.decision with input as call([delete_file]) with data.toolgate.approvers as {}
	d.result == "require_approval"
	d.approver_roles == []
	approved := toolgate.decision with input as call([delete_file, approved_by("bob")])
		with data.toolgate.approvers as {}
	approved.result == "deny"
	reasons_mention(approved, "rule: approvers.default")
}

test_critical_approvers_come_from_by_risk if {
	patches := [critical, reversible, actor("dave"), approved_by("bob")]
	d := toolgate.decision with input as call(patches)
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
	d.result == "deny"
	reasons_mention(d, "rule: approvers.by_risk.critical")
}

# --- who --------------------------------------------------------------------------------------

test_unknown_actor_denied if {
	d := toolgate.decision with input as call([actor("mallory")])
	d.result == "deny"
	reasons_mention(d, "actor 'mallory' is unknown (rule: actors)")
}

test_actor_without_roles_denied if {
	d := toolgate.decision with input as base
		with data.toolgate.actors.alice as {"roles": []}
	d.result == "deny"
	reasons_mention(d, "rule: actors.alice.roles")
}

test_roles_in_the_request_are_not_trusted if {
	d := toolgate.decision with input as call([{"actor": {"user_id": "bob", "roles": ["agent"]}}])
	d.result == "deny"
	reasons_mention(d, "no role of actor 'bob'")
}

test_missing_input_denied if {
	d := toolgate.decision with input as {}
	d.result == "deny"
	reasons_mention(d, "actor '(missing)' is unknown")
	reasons_mention(d, "workspace '(missing)' is unknown")
}

# --- where ------------------------------------------------------------------------------------

test_unknown_workspace_denied if {
	d := toolgate.decision with input as call([{"workspace": {"id": "elsewhere"}}])
	d.result == "deny"
	reasons_mention(d, "rule: workspaces)")
}

test_non_member_denied if {
	d := toolgate.decision with input as call([{"workspace": {"id": "ops"}}])
	d.result == "deny"
	reasons_mention(d, "rule: workspaces.ops.members")
}

test_workspace_without_members_admits_nobody if {
	d := toolgate.decision with input as base
		with data.toolgate.workspaces.demo as {"root": "var/workspaces/demo"}
	d.result == "deny"
}

test_path_outside_workspace_denied if {
	d := toolgate.decision with input as call([path("../etc/passwd", false)])
	d.result == "deny"
	reasons_mention(d, "outside the workspace")
}

test_path_without_inside_flag_denied if {
	d := toolgate.decision with input as call([{"paths": [{"argument": "path", "relative": "a"}]}])
	d.result == "deny"
	reasons_mention(d, "rule: paths.inside_workspace")
}

test_path_without_relative_denied if {
	no_relative := {"paths": [{"argument": "path", "inside_workspace": true}]}
	d := toolgate.decision with input as call([no_relative])
	d.result == "deny"
	reasons_mention(d, "rule: paths.relative")
}

test_write_to_protected_path_denied if {
	d := toolgate.decision with input as call([path(".git/config", true)])
	d.result == "deny"
	reasons_mention(d, "protected path '.git/'")
}

test_write_to_protected_directory_itself_denied if {
	d := toolgate.decision with input as call([path(".toolgate", true)])
	d.result == "deny"
}

test_write_to_nested_protected_path_denied if {
	d := toolgate.decision with input as call([path("vendor/lib/.git/HEAD", true)])
	d.result == "deny"
}

test_similar_name_is_not_protected if {
	d := toolgate.decision with input as call([path("my.git/x", true)])
	d.result == "allow"
}

test_read_of_protected_path_allowed if {
	read := {"tool": {"side_effect": "read"}}
	d := toolgate.decision with input as call([path(".git/config", true), read])
	d.result == "allow"
}

# --- what -------------------------------------------------------------------------------------

test_role_not_allowed_for_risk_denied if {
	d := toolgate.decision with input as call([actor("bob")])
	d.result == "deny"
	reasons_mention(d, "rule: risk_rules.medium.roles")
}

test_unknown_risk_denied if {
	d := toolgate.decision with input as call([{"tool": {"risk": "spicy"}}])
	d.result == "deny"
	reasons_mention(d, "no rule for risk 'spicy'")
}

test_critical_denied_without_listed_role if {
	d := toolgate.decision with input as call([critical, reversible])
	d.result == "deny"
	reasons_mention(d, "rule: risk_rules.critical.roles")
}

test_critical_irreversible_denied_even_for_admin if {
	d := toolgate.decision with input as call([critical, actor("dave")])
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
	d.result == "deny"
	reasons_mention(d, "rule: risk_rules.critical.allow_irreversible")
}

test_critical_reversible_for_admin_requires_approval if {
	d := toolgate.decision with input as call([critical, reversible, actor("dave")])
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
	d.result == "require_approval"
	d.approver_roles == ["admin"]
}

test_critical_irreversible_allowed_by_override_and_another_admins_approval if {
	d := toolgate.decision with input as call([critical, actor("dave"), approved_by("erin")])
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
		with data.toolgate.tool_overrides as {"db.drop_table": {"allow_irreversible": true}}
	d.result == "allow"
}

# --- precedence and shape ---------------------------------------------------------------------

test_deny_wins_over_approval if {
	d := toolgate.decision with input as call([delete_file, approved_by("bob"), path("../x", false)])
	d.result == "deny"
}

test_deny_wins_over_require_approval if {
	d := toolgate.decision with input as call([delete_file, path(".git/index", true)])
	d.result == "deny"
}

test_every_reason_names_its_rule if {
	inputs := [
		base,
		call([delete_file]),
		call([actor("mallory"), {"workspace": {"id": "x"}, "tool": {"risk": "spicy"}}]),
		call([path(".git/x", false)]),
	]
	every doc in inputs {
		d := toolgate.decision with input as doc
		count(d.reasons) > 0
		every reason in d.reasons {
			contains(reason, "(rule: ")
		}
	}
}

# --- the shape of deny_reasons (one rule of set comprehensions) -----------------------------

test_unknown_actor_gets_no_roles_message if {
	d := toolgate.decision with input as call([actor("mallory")])
	d.result == "deny"
	not reasons_mention(d, "has no roles")
	not reasons_mention(d, "no role of actor")
}

test_every_failing_check_adds_its_reason_sorted if {
	patches := [
		actor("bob"),
		{"workspace": {"id": "ops"}},
		{"paths": [
			{"argument": "src", "relative": ".git/HEAD", "inside_workspace": false},
			{"argument": "dst", "inside_workspace": true},
		]},
	]
	d := toolgate.decision with input as call(patches)
	d == {"result": "deny", "reasons": [
		"argument 'dst' has no workspace-relative path (rule: paths.relative)",
		"argument 'src' points outside the workspace (rule: paths.inside_workspace)",
		"argument 'src' writes to protected path '.git/' (rule: protected_paths)",
		"no role of actor 'bob' may call medium-risk tool fs.write_file (rule: risk_rules.medium.roles)",
	]}
}

test_external_tool_may_not_touch_protected_path if {
	external := {"tool": {"side_effect": "external"}}
	d := toolgate.decision with input as call([external, path(".toolgate/state", true)])
	d.result == "deny"
	reasons_mention(d, "protected path '.toolgate/'")
}

# --- tool overrides -----------------------------------------------------------------------------

test_override_of_roles_is_named_in_the_reason if {
	d := toolgate.decision with input as base
		with data.toolgate.tool_overrides as {"fs.write_file": {"roles": ["approver"]}}
	d.result == "deny"
	reasons_mention(d, "rule: tool_overrides.fs.write_file.roles")
}

test_without_overrides_the_risk_rule_alone_decides if {
	d := toolgate.decision with input as call([delete_file])
		with data.toolgate.tool_overrides as {}
	d == {"result": "allow", "reasons": [
		"medium-risk tool fs.delete_file allowed for actor 'alice' (rule: risk_rules.medium.roles)",
	]}
}

# --- roles of the caller's credential (a JWT's claims, mapped by the gateway) ---------------

jwt_caller(id, roles) := {"actor": {
	"user_id": id,
	"roles": roles,
	"credential": {"method": "jwt", "roles": roles},
}}

test_a_credential_role_lets_an_actor_unknown_to_the_data_call if {
	d := toolgate.decision with input as call([jwt_caller("oidc:dave", ["agent"])])
		with data.toolgate.workspaces.demo.member_roles as ["agent"]
	d.result == "allow"
}

test_a_credential_role_that_no_rule_names_is_denied if {
	d := toolgate.decision with input as call([jwt_caller("oidc:dave", ["viewer"])])
		with data.toolgate.workspaces.demo.member_roles as ["viewer"]
	d.result == "deny"
	reasons_mention(d, "no role of actor 'oidc:dave' may call medium-risk tool")
}

test_a_credential_without_roles_leaves_an_unknown_actor_unknown if {
	d := toolgate.decision with input as call([jwt_caller("oidc:dave", [])])
	d.result == "deny"
	reasons_mention(d, "actor 'oidc:dave' is unknown (rule: actors)")
}

test_credential_roles_add_to_the_data_roles if {
	# bob (approver in the data) with an agent role from his token may write
	d := toolgate.decision with input as call([jwt_caller("bob", ["agent"])])
	d.result == "allow"
}

test_a_workspace_admits_by_member_roles_only_the_roles_listed if {
	d := toolgate.decision with input as call([jwt_caller("oidc:dave", ["agent"])])
	d.result == "deny"
	reasons_mention(d, "actor 'oidc:dave' is not a member of workspace 'demo'")
}

# --- listing (MCP tools/list): could the actor ever be allowed to call the tool here? --------

# A listing input: the tool, the actor and the workspace of the base call, and nothing of a
# call (no arguments, paths, request, approval).
listing(patches) := json.filter(call(patches), ["tool", "actor", "workspace"])

test_a_tool_the_actor_may_call_is_listed if {
	toolgate.listed with input as listing([])
}

test_a_tool_that_needs_approval_is_listed if {
	toolgate.listed with input as listing([delete_file, {"tool": {"risk": "high"}}])
}

test_a_role_the_rule_does_not_name_is_not_listed if {
	not toolgate.listed with input as listing([actor("bob")]) # approver: low risk only
}

test_a_low_risk_tool_is_listed_for_an_approver if {
	toolgate.listed with input as listing([actor("bob"), {"tool": {"risk": "low"}}])
}

test_an_unknown_actor_is_not_listed_anything if {
	not toolgate.listed with input as listing([actor("mallory")])
}

test_a_non_member_is_not_listed_anything if {
	not toolgate.listed with input as listing([{"workspace": {"id": "ops"}}])
}

test_an_unknown_workspace_lists_nothing if {
	not toolgate.listed with input as listing([{"workspace": {"id": "nowhere"}}])
}

test_a_critical_irreversible_tool_is_not_listed_even_for_an_admin if {
	not toolgate.listed with input as listing([critical, actor("dave")])
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
}

test_a_critical_reversible_tool_is_listed_for_an_admin if {
	toolgate.listed with input as listing([critical, reversible, actor("dave")])
		with data.toolgate.actors as actors_with_admins
		with data.toolgate.workspaces.demo.members as ["dave"]
}

test_an_empty_listing_input_is_not_listed if {
	not toolgate.listed with input as {}
}

test_the_listing_ignores_what_only_a_call_carries if {
	# a path outside the workspace denies that call, not every call: the tool stays listed
	toolgate.listed with input as object.union(listing([]), path("../x", false))
	d := toolgate.decision with input as call([path("../x", false)])
	d.result == "deny"
}

test_credential_roles_count_for_the_listing if {
	toolgate.listed with input as listing([jwt_caller("oidc:dave", ["agent"])])
		with data.toolgate.workspaces.demo.member_roles as ["agent"]
}

test_every_standing_refusal_denies_the_call if {
	d := toolgate.decision with input as call([actor("bob")])
	d.result == "deny"
	some msg in toolgate.standing_refusals with input as listing([actor("bob")])
	msg in d.reasons
}
