//! The gRPC codec of the generated client and server: prost's, except that a request
//! the server cannot decode is answered `INVALID_ARGUMENT` (the caller sent bad bytes,
//! resending them cannot help) instead of tonic's `INTERNAL`, which the contract keeps
//! for faults of the server. A response the client cannot decode stays `INTERNAL`.
//!
//! Which side a decode is on follows from the message type: each request type says
//! [`DecodeFailure::CODE`] is `InvalidArgument`, each response type `Internal`.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::v1;

/// The status code a message that does not decode is answered with.
pub trait DecodeFailure {
    /// `InvalidArgument` for requests (decoded by the server), `Internal` for
    /// responses (decoded by the client).
    const CODE: tonic::Code;
}

macro_rules! decode_failure {
    ($code:ident: $($t:ty),+ $(,)?) => {
        $(impl DecodeFailure for $t {
            const CODE: tonic::Code = tonic::Code::$code;
        })+
    };
}

decode_failure!(
    InvalidArgument: v1::GrantRequest,
    v1::GrantAsyncRequest,
    v1::GrantBatchRequest,
    v1::GetBudgetRequest,
    v1::SetBudgetRequest,
    v1::SendRewardRequest,
    v1::SendRewardsRequest,
    v1::AgentHealthRequest,
);
decode_failure!(
    Internal: v1::GrantResponse,
    v1::GrantAsyncResponse,
    v1::GrantBatchResponse,
    v1::BudgetState,
    v1::SetBudgetResponse,
    v1::SendRewardReply,
    v1::SendRewardsReply,
    v1::AgentHealthReply,
);

/// [`ProstCodec`] with the decode failures of [`DecodeFailure`].
#[derive(Debug, Clone)]
pub struct ContractCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ContractCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for ContractCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + DecodeFailure + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ContractDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ContractDecoder(ProstCodec::<T, U>::default().decoder())
    }
}

/// Prost's decoder, its failures recoded by [`DecodeFailure`].
#[derive(Debug)]
pub struct ContractDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default + DecodeFailure> Decoder for ContractDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if s.code() == tonic::Code::Internal && U::CODE != tonic::Code::Internal {
                Status::new(U::CODE, s.message().to_string())
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
