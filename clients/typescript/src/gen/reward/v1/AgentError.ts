// Original file: proto/reward/v1/agent.proto

import type { AgentErrorCode as _reward_v1_AgentErrorCode, AgentErrorCode__Output as _reward_v1_AgentErrorCode__Output } from '../../reward/v1/AgentErrorCode.js';

export interface AgentError {
  'code'?: (_reward_v1_AgentErrorCode);
  'field'?: (string);
  'message'?: (string);
}

export interface AgentError__Output {
  'code': (_reward_v1_AgentErrorCode__Output);
  'field': (string);
  'message': (string);
}
