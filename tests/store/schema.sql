-- schema version 7
-- sqlite
CREATE TABLE executions (
	id VARCHAR(64) NOT NULL, 
	principal VARCHAR(128) NOT NULL, 
	agent_id VARCHAR(128) NOT NULL, 
	run_id VARCHAR(256) NOT NULL, 
	turn_id VARCHAR(256) NOT NULL, 
	call_id VARCHAR(256) NOT NULL, 
	payload_sha256 VARCHAR(64) NOT NULL, 
	workspace_id VARCHAR(128) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	tool_version VARCHAR(64), 
	risk VARCHAR(16), 
	status VARCHAR(32) NOT NULL, 
	outcome VARCHAR(32), 
	arguments_sha256 VARCHAR(64), 
	idempotency_scope VARCHAR(64), 
	approval_id VARCHAR(64), 
	cancellation_token VARCHAR(256), 
	request_json VARCHAR NOT NULL, 
	result_json VARCHAR, 
	fencing_json VARCHAR, 
	owner VARCHAR(256), 
	created_ms BIGINT NOT NULL, 
	updated_ms BIGINT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_execution_call UNIQUE (principal, run_id, call_id)
);
CREATE INDEX ix_executions_call ON executions (call_id);
CREATE INDEX ix_executions_cancellation_token ON executions (cancellation_token);
CREATE INDEX ix_executions_quota ON executions (principal, workspace_id, risk, created_ms);
CREATE INDEX ix_executions_run ON executions (run_id, call_id);
CREATE INDEX ix_executions_status ON executions (status);
CREATE TABLE events (
	id VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	seq INTEGER NOT NULL, 
	type VARCHAR(64) NOT NULL, 
	version INTEGER NOT NULL, 
	at_ms BIGINT NOT NULL, 
	data_json VARCHAR NOT NULL, 
	prev VARCHAR(64), 
	hash VARCHAR(64), 
	PRIMARY KEY (id), 
	CONSTRAINT uq_event_seq UNIQUE (execution_id, seq)
);
CREATE TABLE idempotency (
	scope VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	arguments_sha256 VARCHAR(64) NOT NULL, 
	tool_version VARCHAR(64) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	PRIMARY KEY (scope)
);
CREATE INDEX ix_idempotency_expires_ms ON idempotency (expires_ms);
CREATE TABLE locks (
	"key" VARCHAR(512) NOT NULL, 
	holder VARCHAR(64) NOT NULL, 
	holder_call_id VARCHAR(256) NOT NULL, 
	mode VARCHAR(16) NOT NULL, 
	token BIGINT NOT NULL, 
	lease_until_ms BIGINT NOT NULL, 
	PRIMARY KEY ("key", holder)
);
CREATE TABLE lock_fences (
	"key" VARCHAR(512) NOT NULL, 
	last_token BIGINT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE approvals (
	id VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	tool_version VARCHAR(64) NOT NULL, 
	arguments_sha256 VARCHAR(64) NOT NULL, 
	principal VARCHAR(128) NOT NULL, 
	workspace_id VARCHAR(128) NOT NULL, 
	reasons_json VARCHAR NOT NULL, 
	arguments_json VARCHAR NOT NULL, 
	preview_json VARCHAR NOT NULL, 
	requested_ms BIGINT NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	decided_by VARCHAR(128), 
	decided_ms BIGINT, 
	comment VARCHAR, 
	approver_roles_json VARCHAR, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_approvals_execution_id ON approvals (execution_id);
CREATE INDEX ix_approvals_status ON approvals (status);
CREATE TABLE revoked_keys (
	key_id VARCHAR(128) NOT NULL, 
	revoked_ms BIGINT NOT NULL, 
	revoked_by VARCHAR(128) NOT NULL, 
	reason VARCHAR NOT NULL, 
	PRIMARY KEY (key_id)
);
CREATE TABLE ended_sessions (
	session_id VARCHAR(64) NOT NULL, 
	ended_ms BIGINT NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	PRIMARY KEY (session_id)
);
CREATE INDEX ix_ended_sessions_expires_ms ON ended_sessions (expires_ms);
CREATE TABLE notifications (
	id VARCHAR(64) NOT NULL, 
	endpoint VARCHAR(2048) NOT NULL, 
	event VARCHAR(32) NOT NULL, 
	approval_id VARCHAR(64) NOT NULL, 
	body VARCHAR NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	created_ms BIGINT NOT NULL, 
	due_ms BIGINT NOT NULL, 
	claimed_by VARCHAR(256), 
	last_error VARCHAR, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_notifications_approval_id ON notifications (approval_id);
CREATE INDEX ix_notifications_due ON notifications (status, due_ms);
CREATE TABLE replicas (
	id VARCHAR(256) NOT NULL, 
	node VARCHAR(256) NOT NULL, 
	host VARCHAR(256) NOT NULL, 
	pid BIGINT NOT NULL, 
	started_ms BIGINT NOT NULL, 
	heartbeat_ms BIGINT NOT NULL, 
	lease_until_ms BIGINT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_replicas_lease_until_ms ON replicas (lease_until_ms);
CREATE TABLE schema_version (
	id INTEGER NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE audit_checkpoints (
	seq BIGINT NOT NULL, 
	at_ms BIGINT NOT NULL, 
	prev VARCHAR(64) NOT NULL, 
	heads_json VARCHAR NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	key_id VARCHAR(64) NOT NULL, 
	signature VARCHAR(256) NOT NULL, 
	writer VARCHAR(256) NOT NULL, 
	PRIMARY KEY (seq)
);
CREATE TABLE shadow_differences (
	id VARCHAR(64) NOT NULL, 
	at_ms BIGINT NOT NULL, 
	kind VARCHAR(64) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	execution_id VARCHAR(64), 
	call_id VARCHAR(256) NOT NULL, 
	enforced_revision VARCHAR(128) NOT NULL, 
	candidate_revision VARCHAR(128) NOT NULL, 
	enforced_json VARCHAR NOT NULL, 
	candidate_json VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_shadow_differences_at_ms ON shadow_differences (at_ms);
-- postgresql
CREATE TABLE executions (
	id VARCHAR(64) NOT NULL, 
	principal VARCHAR(128) NOT NULL, 
	agent_id VARCHAR(128) NOT NULL, 
	run_id VARCHAR(256) NOT NULL, 
	turn_id VARCHAR(256) NOT NULL, 
	call_id VARCHAR(256) NOT NULL, 
	payload_sha256 VARCHAR(64) NOT NULL, 
	workspace_id VARCHAR(128) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	tool_version VARCHAR(64), 
	risk VARCHAR(16), 
	status VARCHAR(32) NOT NULL, 
	outcome VARCHAR(32), 
	arguments_sha256 VARCHAR(64), 
	idempotency_scope VARCHAR(64), 
	approval_id VARCHAR(64), 
	cancellation_token VARCHAR(256), 
	request_json VARCHAR NOT NULL, 
	result_json VARCHAR, 
	fencing_json VARCHAR, 
	owner VARCHAR(256), 
	created_ms BIGINT NOT NULL, 
	updated_ms BIGINT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_execution_call UNIQUE (principal, run_id, call_id)
);
CREATE INDEX ix_executions_call ON executions (call_id);
CREATE INDEX ix_executions_cancellation_token ON executions (cancellation_token);
CREATE INDEX ix_executions_quota ON executions (principal, workspace_id, risk, created_ms);
CREATE INDEX ix_executions_run ON executions (run_id, call_id);
CREATE INDEX ix_executions_status ON executions (status);
CREATE TABLE events (
	id VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	seq INTEGER NOT NULL, 
	type VARCHAR(64) NOT NULL, 
	version INTEGER NOT NULL, 
	at_ms BIGINT NOT NULL, 
	data_json VARCHAR NOT NULL, 
	prev VARCHAR(64), 
	hash VARCHAR(64), 
	PRIMARY KEY (id), 
	CONSTRAINT uq_event_seq UNIQUE (execution_id, seq)
);
CREATE TABLE idempotency (
	scope VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	arguments_sha256 VARCHAR(64) NOT NULL, 
	tool_version VARCHAR(64) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	PRIMARY KEY (scope)
);
CREATE INDEX ix_idempotency_expires_ms ON idempotency (expires_ms);
CREATE TABLE locks (
	key VARCHAR(512) NOT NULL, 
	holder VARCHAR(64) NOT NULL, 
	holder_call_id VARCHAR(256) NOT NULL, 
	mode VARCHAR(16) NOT NULL, 
	token BIGINT NOT NULL, 
	lease_until_ms BIGINT NOT NULL, 
	PRIMARY KEY (key, holder)
);
CREATE TABLE lock_fences (
	key VARCHAR(512) NOT NULL, 
	last_token BIGINT NOT NULL, 
	PRIMARY KEY (key)
);
CREATE TABLE approvals (
	id VARCHAR(64) NOT NULL, 
	execution_id VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	tool_version VARCHAR(64) NOT NULL, 
	arguments_sha256 VARCHAR(64) NOT NULL, 
	principal VARCHAR(128) NOT NULL, 
	workspace_id VARCHAR(128) NOT NULL, 
	reasons_json VARCHAR NOT NULL, 
	arguments_json VARCHAR NOT NULL, 
	preview_json VARCHAR NOT NULL, 
	requested_ms BIGINT NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	decided_by VARCHAR(128), 
	decided_ms BIGINT, 
	comment VARCHAR, 
	approver_roles_json VARCHAR, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_approvals_execution_id ON approvals (execution_id);
CREATE INDEX ix_approvals_status ON approvals (status);
CREATE TABLE revoked_keys (
	key_id VARCHAR(128) NOT NULL, 
	revoked_ms BIGINT NOT NULL, 
	revoked_by VARCHAR(128) NOT NULL, 
	reason VARCHAR NOT NULL, 
	PRIMARY KEY (key_id)
);
CREATE TABLE ended_sessions (
	session_id VARCHAR(64) NOT NULL, 
	ended_ms BIGINT NOT NULL, 
	expires_ms BIGINT NOT NULL, 
	PRIMARY KEY (session_id)
);
CREATE INDEX ix_ended_sessions_expires_ms ON ended_sessions (expires_ms);
CREATE TABLE notifications (
	id VARCHAR(64) NOT NULL, 
	endpoint VARCHAR(2048) NOT NULL, 
	event VARCHAR(32) NOT NULL, 
	approval_id VARCHAR(64) NOT NULL, 
	body VARCHAR NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	created_ms BIGINT NOT NULL, 
	due_ms BIGINT NOT NULL, 
	claimed_by VARCHAR(256), 
	last_error VARCHAR, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_notifications_approval_id ON notifications (approval_id);
CREATE INDEX ix_notifications_due ON notifications (status, due_ms);
CREATE TABLE replicas (
	id VARCHAR(256) NOT NULL, 
	node VARCHAR(256) NOT NULL, 
	host VARCHAR(256) NOT NULL, 
	pid BIGINT NOT NULL, 
	started_ms BIGINT NOT NULL, 
	heartbeat_ms BIGINT NOT NULL, 
	lease_until_ms BIGINT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_replicas_lease_until_ms ON replicas (lease_until_ms);
CREATE TABLE schema_version (
	id SERIAL NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE audit_checkpoints (
	seq BIGSERIAL NOT NULL, 
	at_ms BIGINT NOT NULL, 
	prev VARCHAR(64) NOT NULL, 
	heads_json VARCHAR NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	key_id VARCHAR(64) NOT NULL, 
	signature VARCHAR(256) NOT NULL, 
	writer VARCHAR(256) NOT NULL, 
	PRIMARY KEY (seq)
);
CREATE TABLE shadow_differences (
	id VARCHAR(64) NOT NULL, 
	at_ms BIGINT NOT NULL, 
	kind VARCHAR(64) NOT NULL, 
	tool_name VARCHAR(128) NOT NULL, 
	execution_id VARCHAR(64), 
	call_id VARCHAR(256) NOT NULL, 
	enforced_revision VARCHAR(128) NOT NULL, 
	candidate_revision VARCHAR(128) NOT NULL, 
	enforced_json VARCHAR NOT NULL, 
	candidate_json VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_shadow_differences_at_ms ON shadow_differences (at_ms);
