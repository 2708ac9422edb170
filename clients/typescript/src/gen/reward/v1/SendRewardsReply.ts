// Original file: proto/reward/v1/agent.proto

import type { SendRewardReply as _reward_v1_SendRewardReply, SendRewardReply__Output as _reward_v1_SendRewardReply__Output } from '../../reward/v1/SendRewardReply.js';

export interface SendRewardsReply {
  'replies'?: (_reward_v1_SendRewardReply)[];
}

export interface SendRewardsReply__Output {
  'replies': (_reward_v1_SendRewardReply__Output)[];
}
