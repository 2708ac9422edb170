// Original file: proto/reward/v1/agent.proto

import type { IssuedReward as _reward_v1_IssuedReward, IssuedReward__Output as _reward_v1_IssuedReward__Output } from '../../reward/v1/IssuedReward.js';
import type { AgentError as _reward_v1_AgentError, AgentError__Output as _reward_v1_AgentError__Output } from '../../reward/v1/AgentError.js';

export interface SendRewardReply {
  'issued'?: (_reward_v1_IssuedReward | null);
  'error'?: (_reward_v1_AgentError | null);
  'result'?: "issued"|"error";
}

export interface SendRewardReply__Output {
  'issued'?: (_reward_v1_IssuedReward__Output | null);
  'error'?: (_reward_v1_AgentError__Output | null);
  'result'?: "issued"|"error";
}
