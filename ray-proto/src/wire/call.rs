//! Requests tied to their replies: [`Call`], [`FromReply`], [`Done`], and
//! the macros that declare the service enums and their call tables.
//!
//! A request is its own struct (`RegisterNode`); its service enum has one
//! variant of the same name (`GcsRequest::RegisterNode(RegisterNode)`), and
//! [`Message`] one variant per service direction (`Message::Gcs`). The
//! macros write the repetitive parts: the `From` conversions up to
//! [`Message`], the variant names ([`Message::kind`]), and one
//! `impl Call` per row of a table `Request => Reply`.

use super::Message;

/// A request that gets exactly one reply, and the type of that reply.
///
/// A client sends `request.into()` and hands what comes back to
/// [`Call::reply`]: it gets the typed reply, or the message back when it is
/// not one (a [`Message::Error`], a refusal, or a reply of another kind),
/// so the client decides how to report it.
pub trait Call: Into<Message> {
    /// What a successful answer holds: a reply struct, a reply enum where
    /// several answers are normal, or [`Done`] for [`Message::Ok`].
    type Reply: FromReply;

    /// `message` as the reply to this request, or `Err(message)` when it is
    /// not one.
    ///
    /// # Errors
    ///
    /// The message itself, unchanged, when it does not hold a
    /// [`Call::Reply`].
    // The message goes back as it came, unboxed: the caller matches on it.
    #[allow(clippy::result_large_err)]
    fn reply(message: Message) -> Result<Self::Reply, Message> {
        Self::Reply::from_message(message)
    }
}

/// A reply that can be taken out of the [`Message`] carrying it.
pub trait FromReply: Sized {
    /// The reply inside `message`.
    ///
    /// # Errors
    ///
    /// `message` unchanged when it holds something else.
    #[allow(clippy::result_large_err)]
    fn from_message(message: Message) -> Result<Self, Message>;
}

/// The reply of a request answered with the generic [`Message::Ok`]: it
/// succeeded and has nothing to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Done;

impl FromReply for Done {
    fn from_message(message: Message) -> Result<Self, Message> {
        match message {
            Message::Ok => Ok(Done),
            other => Err(other),
        }
    }
}

/// Declares a service enum with one tuple variant per message struct of the
/// same name, its `kind`, and `From` each struct into the enum and into
/// [`Message`] (as `Message::$wrap`; `Message` is named at the call site,
/// which imports it). With `replies` first, each struct
/// and the enum itself also implement [`FromReply`].
macro_rules! service_enum {
    (
        replies
        $(#[$meta:meta])*
        pub enum $name:ident in $message:ident::$wrap:ident {
            $( $(#[$vmeta:meta])* $variant:ident, )*
        }
    ) => {
        service_enum! {
            $(#[$meta])*
            pub enum $name in $message::$wrap {
                $( $(#[$vmeta])* $variant, )*
            }
        }

        impl $crate::wire::FromReply for $name {
            fn from_message(
                message: $message,
            ) -> Result<Self, $message> {
                match message {
                    $message::$wrap(reply) => Ok(reply),
                    other => Err(other),
                }
            }
        }

        $(
            impl $crate::wire::FromReply for $variant {
                fn from_message(
                    message: $message,
                ) -> Result<Self, $message> {
                    match message {
                        $message::$wrap($name::$variant(reply)) => Ok(reply),
                        other => Err(other),
                    }
                }
            }
        )*
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident in $message:ident::$wrap:ident {
            $( $(#[$vmeta:meta])* $variant:ident, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($variant), )*
        }

        impl $name {
            /// The name of the message inside (`GetNodes`), for errors.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => stringify!($variant), )*
                }
            }

            /// The name of every variant, for tests that must cover them all.
            #[cfg(test)]
            pub(crate) const KINDS: &'static [&'static str] = &[$( stringify!($variant), )*];
        }

        impl From<$name> for $message {
            fn from(message: $name) -> Self {
                Self::$wrap(message)
            }
        }

        $(
            impl From<$variant> for $name {
                fn from(message: $variant) -> Self {
                    Self::$variant(message)
                }
            }

            impl From<$variant> for $message {
                fn from(message: $variant) -> Self {
                    Self::$wrap($name::$variant(message))
                }
            }
        )*
    };
}

/// Implements [`Call`] for each row `Request => Reply` of a table.
macro_rules! calls {
    ($( $request:ident => $reply:ty, )*) => {
        $(
            impl $crate::wire::Call for $request {
                type Reply = $reply;
            }
        )*
    };
}

pub(super) use {calls, service_enum};
